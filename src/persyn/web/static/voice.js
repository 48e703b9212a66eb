// The "talk" control of the chat page (issue 36): the microphone goes to /v1/voice over a
// WebSocket (the key in the first message, never in the URL), the agent's speech comes back
// as one WAV per piece and is played in order. A mark from the server is answered ("played")
// when the audio sent before it has played; "clear" (the person spoke over the agent) stops
// playback at once. What the agent heard and what it says are shown in the chat log.
"use strict";

const voice = { socket: null, context: null, stream: null, node: null, playAt: 0, sources: [], timers: [] };

function voiceURL() {
  const scheme = location.protocol === "https:" ? "wss:" : "ws:";
  return scheme + "//" + location.host + "/v1/voice";
}

function talkButton(on) {
  const button = $("talk");
  button.textContent = on ? "Stop talking" : "Talk";
  button.setAttribute("aria-pressed", on ? "true" : "false");
  document.body.dataset.talking = on ? "yes" : "no";
}

async function talkStart() {
  if (!state.key) { status("talk: connect with a key first"); return; }
  try {
    voice.stream = await navigator.mediaDevices.getUserMedia({ audio: { channelCount: 1, echoCancellation: true } });
  } catch (error) {
    status("talk: no microphone (" + error.message + ")");
    return;
  }
  voice.context = new AudioContext();
  await voice.context.audioWorklet.addModule("/static/voice-worklet.js");
  voice.node = new AudioWorkletNode(voice.context, "persyn-microphone");
  voice.context.createMediaStreamSource(voice.stream).connect(voice.node);
  voice.playAt = 0;
  const socket = new WebSocket(voiceURL());
  socket.binaryType = "arraybuffer";
  voice.socket = socket;
  socket.onopen = () => socket.send(JSON.stringify({ type: "hello", key: state.key, agent: agentName() }));
  socket.onmessage = (event) => voiceMessage(event.data);
  socket.onclose = (event) => {
    document.body.dataset.voiceClosed = event.code + " " + event.reason;
    if (voice.socket === socket) talkStop();
    if (event.code !== 1000 && event.code !== 1005 && event.reason) status("talk: " + event.reason);
  };
  voice.node.port.onmessage = (event) => {
    if (socket.readyState === WebSocket.OPEN) socket.send(event.data);
  };
  talkButton(true);
}

function talkStop() {
  const socket = voice.socket;
  voice.socket = null;
  if (socket && socket.readyState === WebSocket.OPEN) {
    socket.send(JSON.stringify({ type: "bye" }));
    socket.close(1000);
  }
  stopPlayback();
  if (voice.stream) for (const track of voice.stream.getTracks()) track.stop();
  if (voice.context) voice.context.close();
  voice.stream = voice.context = voice.node = null;
  talkButton(false);
}

function stopPlayback() {
  for (const source of voice.sources) { try { source.stop(); } catch (error) { /* not started */ } }
  for (const timer of voice.timers) clearTimeout(timer);
  voice.sources = [];
  voice.timers = [];
  if (voice.context) voice.playAt = voice.context.currentTime;
}

async function play(data) {
  const context = voice.context;
  if (!context) return;
  const buffer = await context.decodeAudioData(data);
  const source = context.createBufferSource();
  source.buffer = buffer;
  source.connect(context.destination);
  const at = Math.max(context.currentTime, voice.playAt);
  source.start(at);
  voice.playAt = at + buffer.duration;
  voice.sources.push(source);
  source.onended = () => { voice.sources = voice.sources.filter((s) => s !== source); };
  document.body.dataset.spoken = String(Number(document.body.dataset.spoken || 0) + 1);
}

let playing = Promise.resolve();

function voiceMessage(data) {
  if (data instanceof ArrayBuffer) {
    playing = playing.then(() => play(data)).catch((error) => status("talk: " + error.message));
    return;
  }
  let message = {};
  try { message = JSON.parse(data); } catch (error) { return; }
  if (message.type === "ready") status("talking with " + message.agent);
  else if (message.type === "heard") logLine(el("div", "msg user voice", "🎤 " + message.text));
  else if (message.type === "saying") logLine(el("div", "msg agent voice", "🔊 " + message.text));
  else if (message.type === "cut_off") notice("cut off after: " + (message.said || "nothing"));
  else if (message.type === "error") status("talk: " + message.message);
  else if (message.type === "clear") playing = playing.then(stopPlayback);
  else if (message.type === "mark") playing = playing.then(() => markWhenPlayed(message.name));
}

function markWhenPlayed(name) {
  const socket = voice.socket;
  if (!socket || !voice.context) return;
  const wait = Math.max(0, voice.playAt - voice.context.currentTime);
  const answer = () => {
    if (socket.readyState !== WebSocket.OPEN) return;
    socket.send(JSON.stringify({ type: "played", name }));
    document.body.dataset.played = String(Number(document.body.dataset.played || 0) + 1);
  };
  voice.timers.push(setTimeout(answer, wait * 1000));
}

document.addEventListener("DOMContentLoaded", () => {
  $("talk").addEventListener("click", () => (voice.socket ? talkStop() : talkStart()));
});
