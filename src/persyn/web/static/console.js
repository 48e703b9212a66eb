// The operator's console views (issue 40): memory and the recall tester, usage as a stacked
// bar chart with a table beside it, trace waterfalls, the agent's life. Plain JavaScript over
// the `/v1/console/...` API (operator keys only); charts are inline SVG with a text
// alternative and a table of the exact figures. Uses app.js's `api`, `el`, `$`, `state`.
"use strict";

const SVG = "http://www.w3.org/2000/svg";
const PALETTE = ["#0969da", "#1a7f37", "#9a6700", "#8250df", "#cf222e", "#1b7c83", "#bc4c00", "#6e7781"];

function svgEl(tag, attrs, text) {
  const node = document.createElementNS(SVG, tag);
  for (const [name, value] of Object.entries(attrs || {})) node.setAttribute(name, String(value));
  if (text !== undefined) node.textContent = text;
  return node;
}

function agentQuery() { return "agent=" + encodeURIComponent(state.agent); }

function dayStart(value) { return value ? value + "T00:00:00Z" : ""; }

function tableOf(headers, rows, caption) {
  const table = el("table");
  if (caption) table.appendChild(el("caption", "", caption));
  const head = el("tr");
  for (const h of headers) head.appendChild(el("th", "", h));
  table.appendChild(head);
  for (const row of rows) {
    const tr = el("tr");
    for (const cell of row) {
      const td = el("td");
      if (cell instanceof Node) td.appendChild(cell); else td.textContent = cell === null || cell === undefined ? "-" : String(cell);
      tr.appendChild(td);
    }
    table.appendChild(tr);
  }
  return table;
}

function withId(node, id) { node.id = id; return node; }

function fail(box, error) { box.replaceChildren(el("div", "notice error", error.message)); }

// operator actions --------------------------------------------------------------------------
// Only what the CLI lets the operator do, asked once more in a dialog; the server refuses a
// request without `confirm` and logs each action in the agent's activity log.
function confirmAction(question, action, target, done) {
  const dialog = $("confirm-action");
  $("confirm-question").textContent = question;
  dialog.returnValue = "";
  dialog.onclose = async () => {
    if (dialog.returnValue !== "yes") return;
    const said = $("action-done");
    said.hidden = false;
    said.classList.remove("failed");
    try {
      const body = { action, agent: state.agent, confirm: true };
      if (target) body.target = target;
      const data = await api("/v1/console/actions", { method: "POST", body });
      said.textContent = data.outcome;
      if (done) done(data);
    } catch (error) { said.textContent = error.message; said.classList.add("failed"); }
  };
  dialog.showModal();
}

function actionButton(label, onClick) {
  const button = el("button", "action", label);
  button.type = "button";
  button.addEventListener("click", onClick);
  return button;
}

// memory ----------------------------------------------------------------------------------
// Each load is numbered: only the latest one's answer is shown (a tab click and a search
// typed at once must not interleave their pages).
const memoryState = { cursor: null, asked: 0 };

function memoryParams() {
  const params = new URLSearchParams({ agent: state.agent });
  const pairs = [["q", "memory-q"], ["channel", "memory-channel"], ["person", "memory-person"],
    ["sensitivity", "memory-sensitivity"], ["min_importance", "memory-importance"]];
  for (const [name, id] of pairs) if ($(id).value.trim()) params.set(name, $(id).value.trim());
  if ($("memory-from").value) params.set("from", dayStart($("memory-from").value));
  if ($("memory-to").value) params.set("to", dayStart($("memory-to").value));
  return params;
}

async function loadMemories(more) {
  const list = $("memories");
  const asked = ++memoryState.asked;
  const params = memoryParams();
  if (more && memoryState.cursor) params.set("cursor", memoryState.cursor);
  try {
    const data = await api("/v1/console/memories?" + params);
    if (asked !== memoryState.asked) return;
    if (!more) list.replaceChildren();
    $("memory-count").textContent = "(" + data.total_records + " in all)";
    for (const m of data.memories) {
      const item = el("li");
      item.appendChild(link(m.summary, () => showMemory(m.id)));
      item.appendChild(el("span", "tag", new Date(m.created_at).toLocaleString() + " · " + m.channel + " · importance " + m.importance + " · " + m.sensitivity));
      list.appendChild(item);
    }
    if (!list.children.length) list.appendChild(el("li", "tag", "No memory matches."));
    memoryState.cursor = data.next_cursor;
    $("memory-more").hidden = !data.next_cursor;
  } catch (error) { if (asked === memoryState.asked) list.replaceChildren(el("li", "notice error", error.message)); }
}

async function showMemory(id) {
  const box = $("memory");
  box.replaceChildren(el("h3", "", "Memory " + id));
  try {
    const data = await api("/v1/console/memories/" + encodeURIComponent(id) + "?" + agentQuery());
    const m = data.memory;
    box.appendChild(el("p", "summary", m.summary));
    box.appendChild(actionButton("Forget this memory", () => confirmAction(
      "Forget this memory for good? “" + m.summary.slice(0, 120) + "”", "forget_memory", m.id,
      () => { box.replaceChildren(el("div", "tag", "Forgotten.")); loadMemories(false); })));
    box.appendChild(tableOf(["", ""], [
      ["when", new Date(m.created_at).toLocaleString()],
      ["kind", m.kind],
      ["channel", m.channel],
      ["participants", m.participant_ids.join(", ") || "-"],
      ["importance", m.importance],
      ["sensitivity", m.sensitivity],
      ["tags", m.tags.join(", ") || "-"],
      ["emotion", m.emotion],
      ["conversation", m.conversation_id],
      ["imported as", m.ref],
    ], "Provenance and rating"));
    if (data.emotions) {
      const rows = Object.entries(data.emotions).sort((a, b) => b[1] - a[1]).slice(0, 5).map(([k, v]) => [k, v.toFixed(2)]);
      box.appendChild(tableOf(["emotion", "weight"], rows, "Emotional state then"));
    }
    if (data.graph) box.appendChild(graphNeighbours(data.graph));
    box.appendChild(el("h4", "", "The dialog it came from"));
    if (!data.dialog.length) box.appendChild(el("div", "tag", "No dialog is stored with it."));
    for (const line of data.dialog) {
      const node = el("div", "msg " + (line.role === "agent" ? "agent" : "user"));
      node.appendChild(el("span", "who", line.speaker_name + ":"));
      node.appendChild(el("span", "body", line.text));
      box.appendChild(node);
    }
  } catch (error) { fail(box, error); }
}

// Culls and the agent remembering harder, newest first (the activity log's memory events).
async function loadMemoryEvents() {
  const list = $("memory-events");
  try {
    const data = await api("/v1/console/memory-events?limit=20&" + agentQuery());
    if (!data.events.length) { list.replaceChildren(el("li", "tag", "No cull and no remembering harder yet.")); return; }
    list.replaceChildren(...data.events.map((e) => {
      const item = el("li", "event " + e.kind);
      item.appendChild(el("time", "tag", new Date(e.at).toLocaleString()));
      item.appendChild(el("strong", "", " " + e.objective + ": "));
      item.appendChild(el("span", "", e.outcome));
      return item;
    }));
  } catch (error) { list.replaceChildren(el("li", "notice error", error.message)); }
}

// What the knowledge graph links a memory to, read in the memory's own situation.
function graphNeighbours(graph) {
  const section = el("section", "graph-neighbours");
  section.id = "memory-graph";
  section.setAttribute("aria-label", "Graph neighbours");
  section.appendChild(el("h4", "", "Graph neighbours"));
  if (!graph.entities.length) { section.appendChild(el("div", "tag", "The graph links nothing to it.")); return section; }
  section.appendChild(el("p", "", "Entities: " + graph.entities.map((e) => e.name + " (" + e.kind + ")").join(", ")));
  if (graph.relations.length) {
    const list = el("ul", "relations");
    for (const r of graph.relations) list.appendChild(el("li", "", r.line));
    section.appendChild(list);
  }
  if (graph.memories.length) {
    section.appendChild(el("h5", "", "Other memories naming them"));
    const list = el("ul", "related-memories");
    for (const m of graph.memories) {
      const item = el("li");
      const link = el("button", "link", m.summary.slice(0, 140));
      link.type = "button";
      link.addEventListener("click", () => showMemory(m.id));
      item.appendChild(link);
      list.appendChild(item);
    }
    section.appendChild(list);
  }
  return section;
}

async function runRecall(event) {
  event.preventDefault();
  const box = $("recall-results");
  box.replaceChildren(el("div", "tag", "recalling…"));
  const participants = $("recall-participants").value.split(",").map((p) => p.trim()).filter(Boolean);
  const body = { query: $("recall-query").value, agent: state.agent, participants };
  if ($("recall-channel").value.trim()) body.channel = $("recall-channel").value.trim();
  try {
    const data = await api("/v1/console/recall", { method: "POST", body });
    // The score's parts as `persyn memory recall --explain` names them ("-" = not counted).
    const parts = data.results.length ? Object.keys(data.results[0].parts) : [];
    const rows = data.results.map((r) => [
      link(r.memory.summary, () => showMemory(r.memory.id)), r.score.toFixed(3), r.band,
      ...parts.map((name) => (r.parts[name] === null ? null : r.parts[name].toFixed(3))), r.tokens,
    ]);
    const summary = data.results.length + " recalled (" + data.mode + ") of " + data.considered + " considered; " +
      data.withheld + " withheld by sensitivity; " + data.over_budget + " cut by the budget of " + data.budget_tokens + " tokens" +
      (data.degraded ? "; degraded: " + data.degraded : "");
    box.replaceChildren(el("p", "recall-summary", summary),
      tableOf(["memory", "score", "band", ...parts, "tokens"], rows, "What recall returns, best first"));
    // Raw dialog the turn's recall merges in beside the memories ([memory] dialog_recall).
    const said = data.said || [];
    if (said.length) {
      const saidParts = Object.keys(said[0].parts);
      const saidRows = said.map((s) => [
        s.speaker + ": " + s.text, s.channel, s.time.slice(0, 16).replace("T", " "), s.score.toFixed(3), s.band,
        ...saidParts.map((name) => (s.parts[name] === null ? null : s.parts[name].toFixed(3))), s.tokens,
      ]);
      box.appendChild(tableOf(["said", "channel", "when", "score", "band", ...saidParts, "tokens"], saidRows,
        "What was said, merged in from the dialog"));
    }
  } catch (error) { fail(box, error); }
}

// usage -----------------------------------------------------------------------------------
function measure(row, kind) {
  return kind === "cost" ? (row.cost_usd || 0) : row.input_tokens + row.output_tokens;
}

// Every day (or hour) of the range gets its slot, an empty one too: a quiet day reads as one.
function slots(data, from, to) {
  const size = data.bucket === "day" ? 864e5 : 36e5;
  const have = new Map(data.buckets.map((b) => [Date.parse(b.start), b]));
  const first = Math.floor(Date.parse(from) / size) * size;
  const last = Math.min(to ? Date.parse(to) : Date.now(), Date.now());
  if (!(first <= last) || (last - first) / size > 24 * 62) return data.buckets;
  const all = [];
  for (let t = first; t < last; t += size) {
    all.push(have.get(t) || { start: new Date(t).toISOString().replace(".000Z", "Z"), report: { rows: [], total: { input_tokens: 0, output_tokens: 0, cost_usd: null } } });
  }
  return all;
}

function usageChart(data, kind) {
  const keys = [];
  for (const b of data.buckets) for (const row of b.report.rows) if (!keys.includes(row.key)) keys.push(row.key);
  const colour = (key) => PALETTE[keys.indexOf(key) % PALETTE.length];
  const budget = kind === "tokens" && data.bucket === "day" ? data.budgets.find((b) => b.bucket === "day") : null;
  const totals = data.buckets.map((b) => measure(b.report.total, kind));
  // The budget joins the scale when it is near the bars; far above them it is drawn on the
  // top edge and labelled so, rather than flattening every bar to a line.
  const highest = Math.max(1, ...totals);
  const budgetInScale = budget && budget.tokens <= highest * 4;
  const top = budgetInScale ? Math.max(highest, budget.tokens) : highest;
  const width = 640, height = 240, left = 60, bottom = 40, right = 10, topPad = 10;
  const plotW = width - left - right, plotH = height - bottom - topPad;
  const step = plotW / Math.max(1, data.buckets.length);
  const barW = Math.max(2, Math.min(48, step * 0.7));
  const label = (data.bucket === "day" ? "Daily " : "Hourly ") + (kind === "cost" ? "cost in USD" : "tokens") + " by " + data.total.by;
  const svg = svgEl("svg", { viewBox: "0 0 " + width + " " + height, role: "img", "aria-label": label, class: "chart" });
  svg.appendChild(svgEl("title", {}, label + " (the table below holds the figures)"));
  svg.appendChild(svgEl("line", { x1: left, y1: topPad + plotH, x2: left + plotW, y2: topPad + plotH, class: "axis" }));
  svg.appendChild(svgEl("text", { x: left - 6, y: topPad + 10, "text-anchor": "end", class: "tick" }, kind === "cost" ? top.toFixed(4) : String(top)));
  svg.appendChild(svgEl("text", { x: left - 6, y: topPad + plotH, "text-anchor": "end", class: "tick" }, "0"));
  data.buckets.forEach((b, index) => {
    const x = left + index * step + (step - barW) / 2;
    let y = topPad + plotH;
    const group = svgEl("g", { class: "bar", "data-start": b.start, ...(b.report.rows.length ? { tabindex: "0" } : {}) });
    group.appendChild(svgEl("title", {}, b.start + ": " + totals[index] + (kind === "cost" ? " USD" : " tokens") + " — open its traces"));
    for (const row of b.report.rows) {
      const h = (measure(row, kind) / top) * plotH;
      y -= h;
      group.appendChild(svgEl("rect", { x, y, width: barW, height: Math.max(h, 0), fill: colour(row.key), "data-key": row.key }));
    }
    const open = () => openTraces(b.start, data.bucket);
    group.addEventListener("click", open);
    group.addEventListener("keydown", (e) => { if (e.key === "Enter") open(); });
    svg.appendChild(group);
    const when = data.bucket === "day" ? b.start.slice(5, 10) : b.start.slice(5, 10) + " " + b.start.slice(11, 13) + "h";
    if (index % Math.ceil(data.buckets.length / 10) !== 0) return;  // at most ten labels
    svg.appendChild(svgEl("text", { x: x + barW / 2, y: height - bottom + 16, "text-anchor": "middle", class: "tick" }, when));
  });
  if (budget) {
    const y = budgetInScale ? topPad + plotH - (budget.tokens / top) * plotH : topPad;
    const note = budgetInScale ? "" : " (above this scale)";
    svg.appendChild(svgEl("line", { x1: left, y1: y, x2: left + plotW, y2: y, class: "budget" }));
    svg.appendChild(svgEl("text", { x: left + 4, y: y + 12, "text-anchor": "start", class: "budget-label" }, budget.name + ": " + budget.tokens + note));
  }
  keys.forEach((key, index) => {
    const x = left + (index % 4) * 150, y = height - 8;
    svg.appendChild(svgEl("rect", { x, y: y - 9, width: 10, height: 10, fill: colour(key) }));
    svg.appendChild(svgEl("text", { x: x + 14, y, class: "tick" }, key));
  });
  return svg;
}

async function loadUsage(event) {
  if (event) event.preventDefault();
  const chart = $("usage-chart"), box = $("usage-table");
  if (!$("usage-from").value) $("usage-from").value = new Date(Date.now() - 6 * 864e5).toISOString().slice(0, 10);
  const params = new URLSearchParams({ by: $("usage-by").value, bucket: $("usage-bucket").value, from: dayStart($("usage-from").value) });
  if ($("usage-to").value) params.set("to", dayStart($("usage-to").value));
  try {
    const data = await api("/v1/console/usage?" + params);
    const kind = $("usage-measure").value;
    chart.replaceChildren(usageChart({ ...data, buckets: slots(data, params.get("from"), params.get("to")) }, kind));
    const t = data.total.total;
    $("usage-caption").textContent = data.total.records + " model calls, " + (t.input_tokens + t.output_tokens) + " tokens (" + t.input_tokens +
      " in, " + t.output_tokens + " out), " + (t.cost_usd === null ? "unpriced" : t.cost_usd.toFixed(6) + " USD") + " since " + params.get("from").slice(0, 10);
    const rows = [];
    for (const b of data.buckets) for (const r of b.report.rows) rows.push([b.start.slice(0, data.bucket === "day" ? 10 : 16), r.key, r.calls, r.input_tokens, r.output_tokens, r.cost_usd === null ? "-" : r.cost_usd.toFixed(6)]);
    for (const r of data.total.rows) rows.push(["all", r.key, r.calls, r.input_tokens, r.output_tokens, r.cost_usd === null ? "-" : r.cost_usd.toFixed(6)]);
    box.replaceChildren(tableOf([data.bucket, data.total.by, "calls", "input", "output", "cost USD"], rows, "Usage (the ledger's figures)"));
  } catch (error) { fail(chart, error); box.replaceChildren(); }
}

// traces ----------------------------------------------------------------------------------
const traceState = { from: null, to: null };

function openTraces(start, bucket) {
  traceState.from = start;
  traceState.to = new Date(Date.parse(start) + (bucket === "hour" ? 36e5 : 864e5)).toISOString();
  showView("traces");
}

async function loadTraces() {
  const box = $("trace-list");
  const params = new URLSearchParams({ agent: state.agent, limit: "100", from: traceState.from || new Date(Date.now() - 864e5).toISOString() });
  const title = el("h2", "", "Turns " + (traceState.from ? "from " + traceState.from.slice(0, 16) : "of the last day"));
  try {
    const data = await api("/v1/console/traces?" + params);
    const until = traceState.to ? Date.parse(traceState.to) : Infinity;
    const rows = data.traces.filter((t) => Date.parse(t.start) < until).map((t) => [
      link(new Date(t.start).toLocaleString(), () => showTrace(t.trace_id)), t.kind, t.event_id || t.trace_id, t.surface,
      t.duration_ms.toFixed(0) + " ms", t.model_calls, t.tool_calls, t.input_tokens + "/" + t.output_tokens, t.outcome,
    ]);
    box.replaceChildren(title);  // built whole once the answer is in: a second load replaces it
    if (data.note) box.appendChild(el("div", "notice warning", data.note));
    box.appendChild(rows.length ? tableOf(["started", "kind", "event", "surface", "took", "models", "tools", "tokens in/out", "ended"], rows)
      : el("div", "tag", "No turn recorded in that window."));
  } catch (error) { fail(box, error); }
  traceState.from = traceState.to = null;
}

async function showTrace(id) {
  const box = $("waterfall");
  box.replaceChildren(el("h2", "", "Trace " + id));
  try {
    const data = await api("/v1/console/traces/" + encodeURIComponent(id));
    const end = Math.max(1, ...data.spans.map((s) => s.offset_ms + s.duration_ms));
    const list = el("ol", "waterfall");
    list.setAttribute("aria-label", "spans in start order");
    for (const s of data.spans) {
      const row = el("li", "span " + (s.kind || "other") + (s.status === "error" ? " failed" : ""));
      const name = el("span", "span-name", s.name + (s.model ? " · " + s.model : "") + (s.tool ? " · " + s.tool : ""));
      name.style.paddingLeft = s.depth * 1.2 + "em";
      const track = el("span", "track");
      const bar = el("span", "bar");
      bar.style.left = (s.offset_ms / end) * 100 + "%";
      bar.style.width = Math.max(0.4, (s.duration_ms / end) * 100) + "%";
      track.appendChild(bar);
      const tokens = s.input_tokens || s.output_tokens ? " · " + s.input_tokens + "/" + s.output_tokens + " tokens" : "";
      const figures = el("span", "figures", "+" + s.offset_ms.toFixed(1) + " ms · " + s.duration_ms.toFixed(1) + " ms" + tokens + (s.status === "error" ? " · FAILED" : ""));
      row.append(name, track, figures);
      list.appendChild(row);
    }
    box.appendChild(list);
  } catch (error) { fail(box, error); }
}

function showTraceOf(eventId) {
  showView("traces");
  showTrace(eventId);
}

// The turn's critiques, one click away on every agent message: each critic's lens and
// objections (or why it was skipped), the tools, the decision and its reason.
async function toggleCritique(node, eventId) {
  const shown = node.querySelector(".critique");
  if (shown) { shown.remove(); return; }
  const box = el("div", "critique");
  node.appendChild(box);
  await fillCritique(box, eventId);
}

// Deliberation ended for a turn whose critique is open: show what it concluded.
window.refreshCritique = (node, eventId) => {
  const box = node.querySelector(".critique");
  if (box) fillCritique(box, eventId);
};

async function fillCritique(box, eventId) {
  try {
    const data = await api("/v1/console/turns/" + encodeURIComponent(eventId) + "?" + agentQuery());
    const trace = data.deliberation;
    box.replaceChildren();
    if (!trace) box.appendChild(el("div", "tag", "No deliberation was recorded for this turn."));
    else {
      box.appendChild(el("div", "", "deliberation: " + (trace.mode || "?")));
      for (const c of trace.critiques || []) {
        if (c.skipped) { box.appendChild(el("div", "lens", c.lens + ": skipped (" + c.skipped + ")")); continue; }
        const objections = c.objections || [];
        if (!objections.length) box.appendChild(el("div", "lens", c.lens + ": no objections"));
        for (const o of objections) box.appendChild(el("div", "lens objection", c.lens + ": [" + o.kind + "] “" + o.span + "” — " + o.explanation));
      }
      for (const t of trace.tools || []) box.appendChild(el("div", "lens", "tool " + t.name + ": " + t.status));
      if (trace.decision) box.appendChild(el("div", "decision", "decided to " + trace.decision.action + ": " + trace.decision.reason));
    }
    if (data.ended && !data.ended.transmitted) box.appendChild(el("div", "decision", data.ended.reason || "chose silence"));
  } catch (error) { box.replaceChildren(el("div", "notice error", error.message)); }
}

window.traceLink = (node, eventId) => {
  if (!node || !eventId || node.querySelector(".trace-link")) return;
  const a = link("trace", () => showTraceOf(eventId));
  a.className = "trace-link tag";
  a.setAttribute("aria-label", "trace of this answer");
  const why = link("critique", () => toggleCritique(node, eventId));
  why.className = "critique-link tag";
  why.setAttribute("aria-label", "critique of this answer");
  node.append(a, why);
};

// life ------------------------------------------------------------------------------------
// The emotional state after each of the latest exchanges: one stacked column per reading
// (its distribution), the table beside it naming each reading's strongest emotion.
function emotionChart(readings) {
  const names = [];
  for (const r of readings) for (const k of Object.keys(r.distribution)) if (!names.includes(k)) names.push(k);
  const width = 640, height = 90, step = width / Math.max(1, readings.length);
  const label = "Emotional state over the latest " + readings.length + " exchanges";
  const svg = svgEl("svg", { viewBox: "0 0 " + width + " " + (height + 16), role: "img", "aria-label": label, class: "chart emotions" });
  svg.appendChild(svgEl("title", {}, label + " (the table below names each one's strongest)"));
  readings.forEach((r, index) => {
    const total = Object.values(r.distribution).reduce((a, b) => a + b, 0) || 1;
    let y = height;
    for (const name of names) {
      const h = ((r.distribution[name] || 0) / total) * height;
      y -= h;
      const cell = svgEl("rect", { x: index * step + 1, y, width: Math.max(1, step - 2), height: h, fill: PALETTE[names.indexOf(name) % PALETTE.length] });
      cell.appendChild(svgEl("title", {}, r.at + " " + name + " " + (r.distribution[name] || 0).toFixed(2)));
      svg.appendChild(cell);
    }
  });
  names.slice(0, 8).forEach((name, index) => {
    svg.appendChild(svgEl("rect", { x: index * 80, y: height + 6, width: 8, height: 8, fill: PALETTE[index % PALETTE.length] }));
    svg.appendChild(svgEl("text", { x: index * 80 + 11, y: height + 14, class: "tick" }, name));
  });
  return svg;
}

const lifeState = { timer: null };

// Whom a guardrail finding's block stops: everyone only for an agent-wide cause.
function scopeText(g) { return g.scope === "agent" ? "the whole agent (everyone)" : g.scope; }

function cancelButton(reminder) {
  const button = actionButton("Cancel", () => confirmAction(
    "Cancel the reminder “" + reminder.objective.slice(0, 120) + "”?", "cancel_reminder", reminder.id, loadLife));
  button.setAttribute("aria-label", "Cancel reminder: " + reminder.objective.slice(0, 80));
  return button;
}

async function loadLife() {
  // Live while shown: read again every few seconds (a reminder firing, a beat, a finding).
  if (!lifeState.timer) {
    lifeState.timer = setInterval(() => {
      if ($("view-life").hidden) { clearInterval(lifeState.timer); lifeState.timer = null; return; }
      loadLife();
    }, 5000);
  }
  const box = $("life");
  try {
    const [data, links] = await Promise.all([api("/v1/console/life?" + agentQuery()), api("/v1/console/channels")]);
    const beat = data.heartbeat;
    const feelings = data.emotions || [];
    box.replaceChildren(
      el("h2", "", "Reminders"),
      data.reminders.length ? withId(tableOf(["objective", "next fire", "fired", "status", ""], data.reminders.map((r) => [r.objective, new Date(r.next_fire_at).toLocaleString(), r.fire_count, r.status,
        cancelButton(r)])), "life-reminders")
        : el("div", "tag", "No reminder set."),
      el("h2", "", "Goals"),
      data.goals.length ? tableOf(["goal", "status", "since", "outcome"], data.goals.map((g) => [g.description, g.status, new Date(g.created_at).toLocaleString(), g.outcome]))
        : el("div", "tag", "No goal."),
      el("h2", "", "Heartbeat"),
      el("p", "", beat.asleep ? "Asleep (no heartbeat)." : "Next beat " + new Date(beat.next_fire_at).toLocaleString() + "; " + beat.tokens_today + " of " + beat.daily_token_budget + " autonomy tokens spent in the last 24 hours."),
      beat.asleep
        ? actionButton("Resume the heartbeat", () => confirmAction("Resume the heartbeat (idle cognition between conversations)?", "resume_heartbeat", null, loadLife))
        : actionButton("Pause the heartbeat", () => confirmAction("Pause the heartbeat? The agent stops thinking on its own until it is resumed.", "pause_heartbeat", null, loadLife)),
      beat.runs.length ? withId(tableOf(["when", "kind", "objective", "outcome", "tokens"], beat.runs.map((r) => [new Date(r.at).toLocaleString(), r.kind, r.objective, r.outcome, r.tokens])), "life-runs")
        : el("div", "tag", "No run yet."),
      el("h2", "", "Emotional state"),
      ...(feelings.length ? [emotionChart(feelings), tableOf(["when", "strongest"], feelings.slice(-10).reverse().map((r) => [new Date(r.at).toLocaleString(), r.top]))]
        : [el("div", "tag", "No emotional state recorded yet.")]),
      el("h2", "", "Channels"),
      withId(tableOf(["channel", "connection", "state", "since", "failures", "last failure"], links.channels.map((c) => [c.service, c.name || "-", el("span", "link-state " + c.state, c.state), c.since ? new Date(c.since).toLocaleString() : "-", c.failures, c.detail || "-"]), "Channel connections"), "life-channels"),
      el("h2", "", "Guardrail findings"),
      data.guardrail_findings.length ? withId(tableOf(["when", "guardrail", "scope", "reason", "actions", "blocked until"], data.guardrail_findings.map((g) => [new Date(g.detected_at).toLocaleString(), g.guardrail, scopeText(g), g.reason, g.actions.join(", "), g.lifted_at ? "lifted" : g.blocked_until]), "Guardrail findings"), "life-findings")
        : el("div", "tag", "None."),
      el("h2", "", "Blocks in force"),
      data.guardrail_blocks.length ? withId(tableOf(["guardrail", "blocks", "until", "reason"], data.guardrail_blocks.map((g) => [g.guardrail, scopeText(g), new Date(g.blocked_until).toLocaleString(), g.reason]), "Blocks in force"), "life-blocks")
        : el("div", "tag", "No block: the agent speaks to everyone."),
    );
  } catch (error) { fail(box, error); }
}

// people ------------------------------------------------------------------------------------
// A person's page, below the directory's digest: what the agent has observed of them, how
// that changed and why, and the dossier it keeps.
async function showPerson(box, personId) {
  const section = el("div", "person-page");
  section.id = "person-page";
  box.appendChild(section);
  try {
    const data = await api("/v1/console/people/" + encodeURIComponent(personId) + "?" + agentQuery());
    section.appendChild(el("h3", "", "Observations"));
    section.appendChild(data.observations.length
      ? withId(tableOf(["kind", "value", "observed"], data.observations.map((o) => [o.kind, o.value, new Date(o.observed_at).toLocaleString()])), "person-observations")
      : el("div", "tag", "Nothing observed yet."));
    if (data.changes.length) {
      section.appendChild(el("h4", "", "How they changed"));
      section.appendChild(tableOf(["when", "change", "before", "after", "why"], data.changes.slice(0, 20).map((c) => [new Date(c.at).toLocaleString(), c.action, c.before, c.after, c.reason])));
    }
    section.appendChild(el("h3", "", "Dossier"));
    section.appendChild(el("p", "dossier", data.dossier || "No dossier yet."));
  } catch (error) { fail(section, error); }
}

window.consoleViews = {
  person: showPerson,
  memory: () => { loadMemories(false); loadMemoryEvents(); },
  usage: () => loadUsage(),
  traces: () => loadTraces(),
  life: () => loadLife(),
};

document.addEventListener("DOMContentLoaded", () => {
  $("memory-search").addEventListener("submit", (e) => { e.preventDefault(); loadMemories(false); });
  $("memory-more").addEventListener("click", () => loadMemories(true));
  $("recall").addEventListener("submit", runRecall);
  $("usage-form").addEventListener("submit", loadUsage);
});
