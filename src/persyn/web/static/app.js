// Persyn's web page: plain JavaScript, no build step, nothing fetched from elsewhere.
// It uses only the HTTP API (the same one any client gets) with the key typed above.
// Everything shown from the server goes through textContent, never HTML.
"use strict";

const $ = (id) => document.getElementById(id);
const state = { key: "", agent: "", operator: false, stream: null, turns: new Map(), files: [] };

function el(tag, cls, text) {
  const node = document.createElement(tag);
  if (cls) node.className = cls;
  if (text !== undefined) node.textContent = text;
  return node;
}

function status(text) { $("status").textContent = text; }

async function api(path, options = {}) {
  const headers = { Authorization: "Bearer " + state.key };
  if (options.body !== undefined) headers["Content-Type"] = "application/json";
  const response = await fetch(path, {
    method: options.method || "GET",
    headers,
    body: options.body === undefined ? undefined : JSON.stringify(options.body),
    signal: options.signal,
  });
  if (options.raw) return response;
  // A refusal before the app (a body over the cap, a proxy) may not be JSON: its text is shown.
  const raw = await response.text();
  let data = {};
  try { data = raw ? JSON.parse(raw) : {}; } catch (error) { data = { error: { message: raw.slice(0, 300) } }; }
  if (!response.ok) throw new Error((data.error && data.error.message) || (data.detail && String(data.detail)) || response.status + " " + response.statusText);
  return data;
}

// chat ---------------------------------------------------------------------------------
function logLine(node) {
  const log = $("log");
  log.appendChild(node);
  log.scrollTop = log.scrollHeight;
  return node;
}

function message(role, who, text, extra) {
  const node = el("div", "msg " + role);
  node.appendChild(el("span", "who", who + ":"));
  node.appendChild(el("span", "body", text));
  if (extra) node.appendChild(el("span", "tag", extra));
  return logLine(node);
}

function notice(text, level) {
  return logLine(el("div", "notice " + (level || "info"), "· " + text));
}

function agentName() {
  const option = $("agent").selectedOptions[0];
  return option ? option.textContent : "agent";
}

function turn(eventId) {
  let t = state.turns.get(eventId);
  if (!t) {
    t = { draft: null, text: "", surface: null, delivered: false };
    state.turns.set(eventId, t);
  }
  return t;
}

function onLive(kind, data) {
  const t = turn(data.event_id);
  if (kind === "token") {
    if (data.phase === "draft" && data.kind === "delta" && data.text) {
      if (!t.draft) {
        t.draft = message("agent draft", agentName(), "");
        t.draft.dataset.event = data.event_id;
      }
      t.text += data.text;
      document.body.dataset.tokens = String(Number(document.body.dataset.tokens || 0) + 1);
      t.draft.querySelector(".body").textContent = t.text.trimStart();
    } else if (data.phase === "draft" && data.kind === "tool_start") {
      // A tool call as it happens: its name (and, for an operator, its arguments), then how it ended.
      const line = notice("using " + (data.text || "a tool") + (data.arguments ? " " + data.arguments : "") + "…");
      line.classList.add("tool-call");
      line.dataset.tool = data.text || "";
      line.dataset.status = "running";
      (t.tools = t.tools || []).push(line);
    } else if (data.phase === "draft" && data.kind === "tool_end") {
      const line = (t.tools || []).find((node) => node.dataset.status === "running" && node.dataset.tool === data.text);
      if (line) {
        line.dataset.status = data.status || "done";
        line.textContent = line.textContent.replace(/…$/, "") + " → " + (data.status || "done");
      }
    } else if (data.phase === "revise" && data.kind === "delta" && data.text) {
      // The revision's working surface, under the draft or the delivered reply (rules 2-3).
      if (!t.surface) {
        t.surface = el("div", "surface", (t.delivered ? "↳ reconsidering: " : "↳ revising: "));
        const anchor = t.draft || $("log").lastChild;
        if (anchor && anchor.nextSibling) $("log").insertBefore(t.surface, anchor.nextSibling);
        else logLine(t.surface);
      }
      t.surface.textContent += data.text;
    }
  } else if (kind === "withdraw") {
    if (t.draft) {
      t.draft.classList.add("withdrawn");
      t.draft.querySelector(".body").textContent += "";
      t.draft.appendChild(el("span", "tag", "(withdrawn)"));
      if (window.traceLink && state.operator) window.traceLink(t.draft, data.event_id);
    }
    if (t.surface) { t.surface.remove(); t.surface = null; }
  } else if (kind === "notice") {
    notice(data.text, data.level);
  } else if (kind === "message") {
    t.delivered = true;
    const same = t.draft && t.text.split(/\s+/).join(" ").trim() === data.text.split(/\s+/).join(" ").trim();
    if (t.draft) {
      t.draft.classList.remove("draft");
      t.draft.querySelector(".body").textContent = data.text;
      if (!same) t.draft.appendChild(el("span", "tag", "(revised)"));
    } else {
      const when = data.while_away && data.sent_at ? "(while you were away, " + new Date(data.sent_at).toLocaleString() + ")" : "";
      const node = message("agent", agentName(), data.text, when);
      node.dataset.event = data.event_id;
      t.draft = node;
    }
    if (t.surface) { t.surface.remove(); t.surface = null; }
    if (window.traceLink && state.operator) window.traceLink(t.draft, data.event_id);
  } else if (kind === "deliberation_done") {
    if (window.refreshCritique && t.draft) window.refreshCritique(t.draft, data.event_id);
    if (t.surface) {
      t.surface.remove();
      t.surface = null;
      if (data.objections > 0) notice("(reconsidered; I'll fold that into my next reply)");
    }
  } else if (kind === "dropped") {
    notice("the live stream was dropped: " + data.reason, "warning");
  } else if (kind === "revoked") {
    notice("the live stream ended: " + data.reason, "warning");
  }
}

async function loadHistory() {
  // The latest conversation of this key with the agent: what was said (and what arrived
  // while no page was open) is shown before the live stream takes over.
  $("log").replaceChildren();
  state.turns.clear();
  try {
    const own = await api(base() + "/conversations");
    if (!own.conversations.length) return;
    const data = await api(base() + "/conversations/" + own.conversations[0].id);
    for (const m of data.messages.slice(-50)) {
      const node = message(m.role === "agent" ? "agent" : "user", m.role === "agent" ? agentName() : "you", m.text);
      node.classList.add("history");
    }
  } catch (error) { status("history: " + error.message); }
}

async function openStream() {
  await loadHistory();
  if (state.stream) state.stream.abort();
  const controller = new AbortController();
  state.stream = controller;
  let response;
  try {
    response = await api("/v1/agents/" + encodeURIComponent(state.agent) + "/stream", { raw: true, signal: controller.signal });
  } catch (error) {
    if (!controller.signal.aborted) status("stream: " + error.message);
    return;
  }
  if (!response.ok) { status("stream: HTTP " + response.status); return; }
  status("connected to " + agentName());
  document.body.dataset.live = "yes";
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buffer += decoder.decode(value, { stream: true });
      let cut;
      while ((cut = buffer.indexOf("\n\n")) >= 0) {
        const block = buffer.slice(0, cut);
        buffer = buffer.slice(cut + 2);
        let kind = "message", data = "";
        for (const line of block.split("\n")) {
          if (line.startsWith("event: ")) kind = line.slice(7);
          else if (line.startsWith("data: ")) data += line.slice(6);
        }
        if (data) onLive(kind, JSON.parse(data));
      }
    }
  } catch (error) {
    if (!controller.signal.aborted) status("stream ended: " + error.message);
  }
  document.body.dataset.live = "no";
}

// Files to send (the attach button, a paste, a drop): chips with a remove button until sent,
// then the native API's `attachments` (base64 `file_data`, `filename`, `media_type`).
function addFiles(files) {
  for (const file of files) {
    if (file.name) { state.files.push(file); continue; }
    // A pasted screenshot has no name: it gets one the person (and the agent) can refer to.
    state.pasted = (state.pasted || 0) + 1;
    const ext = (file.type.split("/")[1] || "bin").replace(/[^a-z0-9]/gi, "");
    state.files.push(new File([file], "pasted-" + state.pasted + "." + ext, { type: file.type }));
  }
  showChips();
}

function showChips() {
  const box = $("chips");
  box.replaceChildren();
  state.files.forEach((file, index) => {
    const chip = el("span", "chip");
    if (file.type.startsWith("image/")) {
      const preview = el("img");
      preview.alt = "";
      preview.src = URL.createObjectURL(file);
      preview.onload = () => URL.revokeObjectURL(preview.src);
      chip.appendChild(preview);
    }
    chip.appendChild(el("span", "name", file.name || file.type || "file"));
    chip.appendChild(el("span", "tag", Math.max(1, Math.round(file.size / 1024)) + " KB"));
    const remove = el("button", "remove", "×");
    remove.type = "button";
    remove.setAttribute("aria-label", "Remove " + (file.name || "file"));
    remove.addEventListener("click", () => { state.files.splice(index, 1); showChips(); });
    chip.appendChild(remove);
    box.appendChild(chip);
  });
}

function fileData(file) {
  return new Promise((resolve, reject) => {
    const reader = new FileReader();
    reader.onload = () => resolve(String(reader.result).replace(/^data:[^,]*,/, ""));
    reader.onerror = () => reject(reader.error || new Error("could not read " + file.name));
    reader.readAsDataURL(file);
  });
}

async function send(event) {
  event.preventDefault();
  const text = $("text").value;
  const files = state.files.slice();
  if ((!text.trim() && !files.length) || !state.agent) return;
  $("text").value = "";
  state.files = [];
  showChips();
  $("attach").value = "";
  const names = files.map((file) => file.name);
  message("user", "you", text, names.length ? "[" + names.join(", ") + "]" : undefined);
  try {
    const attachments = [];
    for (let i = 0; i < files.length; i++) {
      attachments.push({ file_data: await fileData(files[i]), filename: names[i], media_type: files[i].type || null });
    }
    const body = attachments.length ? { text, attachments } : { text };
    await api("/v1/agents/" + encodeURIComponent(state.agent) + "/events", { method: "POST", body });
  } catch (error) {
    notice(error.message, "error");
  }
}

function takeDroppedFiles() {
  const view = $("view-chat");
  view.addEventListener("dragover", (e) => {
    if (e.dataTransfer && Array.from(e.dataTransfer.types).includes("Files")) { e.preventDefault(); view.classList.add("dropping"); }
  });
  view.addEventListener("dragleave", () => view.classList.remove("dropping"));
  view.addEventListener("drop", (e) => {
    view.classList.remove("dropping");
    if (!e.dataTransfer || !e.dataTransfer.files.length) return;
    e.preventDefault();
    addFiles(e.dataTransfer.files);
  });
  $("text").addEventListener("paste", (e) => {
    const files = Array.from((e.clipboardData && e.clipboardData.files) || []);
    if (!files.length) return;  // text is pasted as text
    e.preventDefault();
    addFiles(files);
  });
  $("attach").addEventListener("change", () => addFiles($("attach").files));
}

// directory ------------------------------------------------------------------------------
const base = () => "/v1/agents/" + encodeURIComponent(state.agent);

function link(text, action) {
  const a = el("a", "", text);
  a.href = "#";
  a.addEventListener("click", (e) => { e.preventDefault(); action(); });
  return a;
}

async function showDialog(conversationId) {
  const box = $("dialog");
  box.hidden = false;
  box.replaceChildren(el("h3", "", "Conversation " + conversationId));
  try {
    const data = await api(base() + "/conversations/" + conversationId);
    for (const m of data.messages) {
      const line = el("div", "msg " + (m.role === "agent" ? "agent" : "user"));
      line.appendChild(el("span", "who", m.speaker_name + ":"));
      line.appendChild(el("span", "body", m.text));
      box.appendChild(line);
    }
  } catch (error) { box.appendChild(el("div", "notice error", error.message)); }
}

function conversationList(conversations) {
  const list = el("ul");
  for (const c of conversations) {
    const item = el("li");
    item.appendChild(link(c.id, () => showDialog(c.id)));
    item.appendChild(el("span", "tag", new Date(c.started_at).toLocaleString() + " — " + (c.summary || "(not consolidated yet)")));
    list.appendChild(item);
  }
  return list;
}

async function loadContacts() {
  const list = $("contacts");
  list.replaceChildren();
  try {
    const data = await api(base() + "/contacts");
    for (const c of data.contacts) {
      const item = el("li");
      const box = el("input");
      box.type = "checkbox";
      box.value = c.person.id;
      box.className = "pick";
      box.setAttribute("aria-label", "select " + c.person.display_name);
      box.addEventListener("change", pickChanged);
      item.appendChild(box);
      item.appendChild(link(c.person.display_name, () => showContact(c.person.id)));
      item.appendChild(el("span", "tag", c.person.identities.map((i) => i.service + ":" + i.speaker_id).join(", ")));
      list.appendChild(item);
    }
    if (!data.contacts.length) list.appendChild(el("li", "tag", "No contacts yet."));
  } catch (error) { list.appendChild(el("li", "notice error", error.message)); }
}

const picked = [];
function pickChanged(event) {
  const id = event.target.value;
  const at = picked.indexOf(id);
  if (event.target.checked && at < 0) picked.push(id);
  if (!event.target.checked && at >= 0) picked.splice(at, 1);
  $("merge").disabled = picked.length !== 2;
}

async function mergePicked() {
  const [survivor, other] = picked;
  try {
    const person = await api(base() + "/contacts/merge", { method: "POST", body: { survivor, other } });
    picked.length = 0;
    $("merge").disabled = true;
    status("merged into " + person.display_name);
    await loadContacts();
    await showContact(person.id);
  } catch (error) { status("merge: " + error.message); }
}

function inlineForm(fields, label, submit) {
  const form = el("form", "inline");
  const inputs = fields.map((name) => {
    const input = el("input");
    input.placeholder = name;
    input.name = name;
    form.appendChild(input);
    return input;
  });
  const button = el("button", "", label);
  button.type = "submit";
  form.appendChild(button);
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    try { await submit(...inputs.map((i) => i.value)); } catch (error) { status(label + ": " + error.message); }
  });
  return form;
}

async function showContact(personId) {
  const box = $("contact");
  box.replaceChildren();
  let c;
  try { c = await api(base() + "/contacts/" + personId); } catch (error) { box.appendChild(el("div", "notice error", error.message)); return; }
  box.appendChild(el("h2", "", c.person.display_name));
  box.appendChild(el("div", "tag", c.person.id));
  box.appendChild(el("h3", "", "Identities"));
  const ids = el("ul");
  for (const i of c.person.identities) {
    const item = el("li", "", i.service + " / " + i.channel + " / " + i.speaker_id + " ");
    item.appendChild(link("detach", async () => {
      try {
        await api(base() + "/contacts/" + personId + "/identities", { method: "POST", body: { service: i.service, channel: i.channel, speaker_id: i.speaker_id, attach: false } });
        await showContact(personId);
      } catch (error) { status("detach: " + error.message); }
    }));
    ids.appendChild(item);
  }
  box.appendChild(ids);
  box.appendChild(inlineForm(["service", "channel", "speaker id"], "Attach", async (service, channel, speaker_id) => {
    await api(base() + "/contacts/" + personId + "/identities", { method: "POST", body: { service, channel, speaker_id, attach: true } });
    await showContact(personId);
  }));
  box.appendChild(el("h3", "", "Addresses"));
  const addresses = el("ul");
  for (const a of c.addresses) addresses.appendChild(el("li", "", a.label + ": " + a.value));
  box.appendChild(addresses);
  box.appendChild(inlineForm(["new name"], "Rename", async (name) => {
    await api(base() + "/contacts/" + personId + "/rename", { method: "POST", body: { name } });
    await loadContacts();
    await showContact(personId);
  }));
  box.appendChild(el("h3", "", "Recent conversations"));
  box.appendChild(conversationList(c.conversations));
  if (window.consoleViews) await window.consoleViews.person(box, personId);
}

async function loadChannels() {
  const list = $("channels");
  list.replaceChildren();
  try {
    const data = await api(base() + "/channels");
    for (const c of data.channels) {
      const name = c.service + ":" + c.channel;
      const item = el("li");
      item.appendChild(link(name, () => showChannel(name)));
      list.appendChild(item);
    }
    if (!data.channels.length) list.appendChild(el("li", "tag", "No conversations yet."));
  } catch (error) { list.appendChild(el("li", "notice error", error.message)); }
}

async function showChannel(name) {
  const box = $("channel");
  box.replaceChildren(el("h2", "", name));
  try {
    const data = await api(base() + "/channels/" + encodeURIComponent(name));
    box.appendChild(conversationList(data.conversations));
  } catch (error) { box.appendChild(el("div", "notice error", error.message)); }
}

// wiring ----------------------------------------------------------------------------------
function showView(name) {
  for (const tab of document.querySelectorAll(".tab")) tab.classList.toggle("active", tab.dataset.view === name);
  for (const view of document.querySelectorAll(".view")) view.hidden = view.id !== "view-" + name;
  $("dialog").hidden = true;
  if (name === "directory") loadContacts();
  if (name === "channels") loadChannels();
  if (window.consoleViews && window.consoleViews[name]) window.consoleViews[name]();
}

async function connect() {
  state.key = $("key").value.trim();
  sessionStorage.setItem("persyn-key", state.key);
  try {
    const me = await api("/v1/me");
    state.operator = me.operator;
    for (const node of document.querySelectorAll(".operator-only")) node.hidden = !me.operator;
    const data = await api("/v1/agents");
    const select = $("agent");
    select.replaceChildren();
    for (const a of data.agents) {
      const option = el("option", "", a.name);
      option.value = a.id;
      select.appendChild(option);
    }
    state.agent = select.value;
    status("key " + me.name + (me.operator ? " (operator)" : ""));
    openStream();
  } catch (error) {
    status("connect: " + error.message);
  }
}

document.addEventListener("DOMContentLoaded", () => {
  $("key").value = sessionStorage.getItem("persyn-key") || "";
  $("connect").addEventListener("click", connect);
  $("agent").addEventListener("change", () => { state.agent = $("agent").value; openStream(); });
  $("send").addEventListener("submit", send);
  takeDroppedFiles();
  $("merge").addEventListener("click", mergePicked);
  for (const tab of document.querySelectorAll(".tab")) tab.addEventListener("click", () => showView(tab.dataset.view));
  if ($("key").value) connect();
});
