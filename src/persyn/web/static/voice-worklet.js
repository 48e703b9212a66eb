// The microphone's worklet for the "talk" control (voice.js): the context's audio, resampled
// to 16 kHz mono, posted as 20 ms frames of 16-bit little-endian PCM (320 samples).
"use strict";

const TARGET = 16000;
const FRAME = 320;

class PersynMicrophone extends AudioWorkletProcessor {
  constructor() {
    super();
    this.step = sampleRate / TARGET; // input samples per output sample
    this.position = 0; // where the next output sample falls, in input samples from `previous`
    this.previous = 0;
    this.frame = new Int16Array(FRAME);
    this.filled = 0;
  }

  process(inputs) {
    const input = inputs[0] && inputs[0][0];
    if (!input) return true;
    // Linear interpolation between the last sample of the previous block and this one.
    while (this.position < input.length) {
      const index = Math.floor(this.position);
      const fraction = this.position - index;
      const before = index === 0 ? this.previous : input[index - 1];
      const after = input[index];
      const value = before + (after - before) * fraction;
      this.frame[this.filled++] = Math.max(-32768, Math.min(32767, Math.round(value * 32767)));
      if (this.filled === FRAME) {
        this.port.postMessage(this.frame.buffer.slice(0));
        this.filled = 0;
      }
      this.position += this.step;
    }
    this.position -= input.length;
    this.previous = input[input.length - 1];
    return true;
  }
}

registerProcessor("persyn-microphone", PersynMicrophone);
