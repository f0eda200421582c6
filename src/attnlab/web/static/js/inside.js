// The inside of a real model, under the multi-head view's model mode (js/models.js): the logit
// lens (GET /api/models/lens), one logit's attribution to every head and part
// (GET /api/models/attribution), heads knocked out (GET /api/models/ablate) and generation
// streamed token by token (GET /api/models/generate, server-sent events). A hover over any head's
// heatmap names the query, the key and the weight. models.js announces each run it shows with a
// "modelshown" event on the section; this module follows it.
// URL: mh.pos (the position read, counted from 0; absent: the last), mh.tok (the token whose logit
// is split; absent: the top prediction), mh.off (heads knocked out, "layer.head" joined by commas),
// mh.new (tokens to generate; absent: 16).
import { api, clearError, config, el, fmt, showError } from "./common.js";
import { readUrl, writeUrl } from "./state.js";

let root = null;
let box = null;
const $ = (sel) => box.querySelector(sel);
let run = null; // models.js's last /api/models/run answer
let lens = null; // the last /api/models/lens answer
let attr = null; // the last /api/models/attribution answer
let knocked = null; // the last /api/models/ablate answer
let asked = { lens: null, attr: null, off: null }; // the requests those answered
const state = { pos: null, tok: null, off: [], new: null };
let source = null; // the AbortController of a generation under way
let limits = null; // { new_default, new_max, max_tokens }: GET /api/config's inside (web/inside.py)

const whole = (text) => { const x = Number(text ?? NaN); return text !== null && text !== "" && Number.isInteger(x) && x >= 0 ? x : null; };
const position = () => Math.min(state.pos ?? run.ids.length - 1, run.ids.length - 1);
const base = () => ({ model: run.model, ids: run.ids.join(" ") });
const query = (extra) => new URLSearchParams({ ...base(), ...extra });
const pct = (p) => `${(100 * p).toFixed(1)}%`;
const quoted = (t) => JSON.stringify(t);

function readState() {
  state.pos = whole(readUrl("mh.pos"));
  state.tok = whole(readUrl("mh.tok"));
  const off = (readUrl("mh.off") || "").split(",").filter((p) => /^\d+\.\d+$/.test(p));
  state.off = [...new Set(off)];
  state.new = Math.min(limits.new_max, Math.max(1, whole(readUrl("mh.new")) ?? limits.new_default));
}

const stateEntries = () => ({
  "mh.pos": state.pos, "mh.tok": state.tok, "mh.off": state.off.join(",") || null,
  "mh.new": state.new === limits.new_default ? null : state.new,
});

// -- the logit lens: layers x positions, each cell the top token and its probability ------------
function drawLens() {
  const pos = position();
  const head = el("tr", {}, el("th", { scope: "col", text: "layer" }), ...lens.tokens.map((t, j) =>
    el("th", { scope: "col", class: j === pos ? "picked" : null },
      el("button", { type: "button", class: "lens-pos", "data-position": j, title: `read position ${j}`, onclick: () => choose({ pos: j, tok: null }) }, `${j}`, el("br"), quoted(t)))));
  const rows = lens.top.map((row, l) => el("tr", {}, el("th", { scope: "row", text: `${l}` }), ...row.map((_, j) => {
    const p = lens.p[l][j];
    return el("td", { class: j === pos ? "picked" : null, style: `--p:${p.toFixed(3)}`, title: `layer ${l}, position ${j}: ${quoted(lens.top_tokens[l][j])} (id ${lens.top[l][j]}) at ${pct(p)}`, "data-layer": l, "data-position": j },
      el("span", { class: "lens-token", text: quoted(lens.top_tokens[l][j]) }), el("span", { class: "lens-p", text: pct(p) }));
  })));
  $("#inside-lens").replaceChildren(el("caption", { text: "Top token (and its probability) of each layer's residual stream read through the final norm and the output head" }),
    el("thead", {}, head), el("tbody", {}, rows));
}

// -- attribution: one bar per head (a button: opens that head's row in the stepper), one per part
function bar(name, value, scale, head) {
  const width = scale > 0 ? (50 * Math.abs(value)) / scale : 0;
  const fill = el("span", { class: `attr-fill ${value < 0 ? "neg" : "pos"}`, style: `width:${width.toFixed(2)}%` });
  const parts = [el("span", { class: "attr-name", text: name }), el("span", { class: "attr-track", "aria-hidden": "true" }, fill), el("span", { class: "attr-value", text: fmt(value) })];
  if (!head) return el("li", { class: "attr-row" }, ...parts);
  return el("li", { class: "attr-row" }, el("button", { type: "button", class: "attr-head", "data-layer": head[0], "data-head": head[1],
    title: `open layer ${head[0]} head ${head[1]}'s row for position ${position()} in the stepper`, onclick: () => openHead(head[0], head[1]) }, ...parts));
}

function drawAttribution() {
  const { parts, heads } = attr;
  const all = [...Object.values(parts), ...heads.flat()];
  const scale = Math.max(...all.map(Math.abs));
  const rows = [];
  for (const name of ["embed", "pos_embed"]) if (name in parts) rows.push(bar(name, parts[name], scale));
  heads.forEach((row, l) => {
    row.forEach((x, h) => rows.push(bar(`L${l}H${h}`, x, scale, [l, h])));
    for (const name of [`L${l}.attn_bias`, `L${l}.mlp`]) if (name in parts) rows.push(bar(name, parts[name], scale));
  });
  if ("ln_final.bias" in parts) rows.push(bar("ln_final.bias", parts["ln_final.bias"], scale));
  const sum = all.reduce((a, b) => a + b, 0);
  $("#inside-attr-note").textContent = `The logit of ${quoted(attr.token_text)} (id ${attr.token}) at position ${attr.position}: ` +
    `${fmt(attr.logit)} (probability ${pct(attr.p)}); the parts below add up to ${fmt(sum)}. Click a head's bar to open its row in the stepper.`;
  $("#inside-attr").replaceChildren(...rows);
}

function openHead(layer, head) {
  const form = root.querySelector("#model-open");
  form.elements.layer.value = String(layer);
  form.elements.head.value = String(head);
  form.elements.query.value = String(position());
  form.requestSubmit(); // the model view's own "Open in the stepper"
}

// -- heads knocked out: a toggle per head, the prediction before and after ----------------------
function drawToggles() {
  const layers = run.kinds.length;
  $("#inside-heads").replaceChildren(...[...Array(layers).keys()].map((l) => el("div", { class: "toggle-row" },
    el("span", { class: "toggle-layer", text: `Layer ${l}` }), ...[...Array(run.heads).keys()].map((h) => {
      const id = `${l}.${h}`;
      return el("button", { type: "button", class: "head-toggle", "data-head": id, "aria-pressed": String(state.off.includes(id)),
        onclick: () => choose({ off: state.off.includes(id) ? state.off.filter((x) => x !== id) : [...state.off, id] }) }, `H${h}`);
    }))));
}

function drawKnocked() {
  const table = $("#inside-ablate");
  if (!state.off.length || !knocked) {
    table.replaceChildren();
    $("#inside-ablate-note").textContent = "Press heads above to knock them out (their output set to 0).";
    return;
  }
  const row = (i) => el("tr", {}, el("th", { scope: "row", text: `${i + 1}` }),
    el("td", { text: `${quoted(knocked.before[i].token)} ${pct(knocked.before[i].p)}` }),
    el("td", { text: `${pct(knocked.after_of_before[i])}` }),
    el("td", { text: `${quoted(knocked.after[i].token)} ${pct(knocked.after[i].p)}` }));
  table.replaceChildren(el("caption", { text: `Next-token prediction at position ${knocked.position} with ${knocked.heads.map((p) => `L${p[0]}H${p[1]}`).join(", ")} knocked out` }),
    el("thead", {}, el("tr", {}, ...["rank", "before", "that token after", "after"].map((t) => el("th", { scope: "col", text: t })))),
    el("tbody", {}, knocked.before.map((_, i) => row(i))));
  const same = knocked.before[0].id === knocked.after[0].id;
  $("#inside-ablate-note").textContent = same ? `The top prediction stays ${quoted(knocked.after[0].token)}.`
    : `The top prediction changes from ${quoted(knocked.before[0].token)} to ${quoted(knocked.after[0].token)}.`;
}

// -- fetching: each view asks only when its request changed --------------------------------------
async function refresh() {
  if (!run) return;
  if (run.ids.length > limits.max_tokens) { // the server's inside routes take no more: ask nothing
    showError($("#inside-error"), new Error(`The lens, attribution and knock-outs take up to ${limits.max_tokens} tokens; this text has ${run.ids.length}.`));
    box.dataset.inside = "shown";
    return;
  }
  const pos = position();
  $("#inside-form").elements.pos.max = String(run.ids.length - 1);
  $("#inside-form").elements.pos.value = String(pos);
  $("#inside-form").elements.tok.value = state.tok ?? "";
  $("#inside-gen").elements.new.value = String(state.new);
  drawToggles();
  const want = { lens: `${query({})}`, attr: `${query({ position: pos, ...(state.tok === null ? {} : { token: state.tok }) })}`, off: state.off.length ? `${query({ position: pos, heads: state.off.join(",") })}` : null };
  try {
    if (want.lens !== asked.lens) { lens = await api(`/api/models/lens?${want.lens}`); asked.lens = want.lens; }
    if (want.attr !== asked.attr) { attr = await api(`/api/models/attribution?${want.attr}`); asked.attr = want.attr; }
    if (want.off && want.off !== asked.off) { knocked = await api(`/api/models/ablate?${want.off}`); asked.off = want.off; }
    clearError($("#inside-error"));
  } catch (err) {
    showError($("#inside-error"), err);
  }
  if (!want.off) knocked = null;
  drawZoom();
  if (lens) drawLens();
  if (attr) drawAttribution();
  drawKnocked();
  box.dataset.inside = "shown";
}

function choose(next) {
  Object.assign(state, next);
  writeUrl(stateEntries());
  refresh();
}

function pickForm(event) {
  event.preventDefault();
  const form = $("#inside-form").elements;
  const pos = whole(form.pos.value);
  if (pos === null || pos >= run.ids.length) {
    showError($("#inside-error"), new Error(`position: expected a position from 0 to ${run.ids.length - 1}, but got “${form.pos.value}”`));
    return;
  }
  const tok = form.tok.value.trim() === "" ? null : whole(form.tok.value.trim());
  if (form.tok.value.trim() !== "" && tok === null) {
    showError($("#inside-error"), new Error(`token: expected a token id (a whole number from 0), or nothing for the top prediction, but got “${form.tok.value}”`));
    return;
  }
  choose({ pos, tok });
}

// -- generation: tokens as they come, until done or Stop -----------------------------------------
// The stream is read with fetch (not EventSource) so that a refusal's words (422) reach the page
// and Stop can abort the request, which ends the server's loop.
function stop(why) {
  if (source) source.abort();
  source = null;
  $("#inside-stop").disabled = true;
  $("#inside-go").disabled = false;
  $("#inside-gen-note").textContent = why;
}

const ENDED = { done: ".", time: ", then the server's time limit.", busy: ", then the server was busy." };

async function generate(event) {
  event.preventDefault();
  const n = whole($("#inside-gen").elements.new.value);
  if (n === null || n < 1 || n > limits.new_max) {
    showError($("#inside-error"), new Error(`new: expected 1 to ${limits.new_max} tokens, but got “${$("#inside-gen").elements.new.value}”`));
    return;
  }
  clearError($("#inside-error"));
  if (n !== state.new) { state.new = n; writeUrl(stateEntries()); }
  stop("");
  const out = $("#inside-out");
  out.replaceChildren();
  const mine = new AbortController();
  source = mine;
  $("#inside-stop").disabled = false;
  $("#inside-go").disabled = true;
  let count = 0;
  try {
    const response = await fetch(`/api/models/generate?${query({ new: n })}`, { signal: mine.signal });
    if (!response.ok) {
      const data = await response.json().catch(() => ({}));
      throw new Error(data.message || `generation failed with HTTP ${response.status}`);
    }
    const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
    let buffer = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buffer += value;
      const blocks = buffer.split("\n\n");
      buffer = blocks.pop(); // an event not yet whole
      for (const block of blocks) {
        const kind = /^event: (.*)$/m.exec(block)?.[1] ?? "message";
        const data = JSON.parse(/^data: (.*)$/m.exec(block)[1]);
        if (kind === "prompt") {
          out.replaceChildren(el("span", { class: "prompt", text: data.text }));
          continue;
        }
        if (kind === "done") {
          stop(`${count} token${count === 1 ? "" : "s"} generated (greedy)${ENDED[data.why] ?? "."}`);
          return;
        }
        count += 1;
        out.append(el("span", { class: "new-token", title: `id ${data.id}: ${quoted(data.token)}`, "data-id": data.id, text: data.text }));
      }
    }
    if (source === mine) stop(`Stopped after ${count} tokens: the connection closed.`);
  } catch (err) {
    if (mine.signal.aborted) return; // Stop (or a new run) ended it and said so
    stop("");
    showError($("#inside-error"), err);
  }
}

// -- the picked head, large, with its tokens on both axes (each small heatmap above has a hover) -
const SVG = "http://www.w3.org/2000/svg";
const svg = (tag, attrs = {}, text = null) => {
  const node = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  if (text !== null) node.textContent = text;
  return node;
};
const short = (t) => { const q = quoted(t); return q.length > 12 ? `${q.slice(0, 11)}…` : q; };

function drawZoom() {
  const layer = whole(readUrl("mh.layer")) ?? 0;
  const head = whole(readUrl("mh.head")) ?? 0;
  const w = run.weights?.[layer]?.[head];
  const fig = $("#inside-zoom");
  fig.hidden = !w;
  if (!w) return;
  const n = w.length;
  const cell = Math.max(8, Math.min(28, Math.floor(560 / n)));
  const margin = 96; // room for a token's text on each axis
  const size = margin + n * cell;
  const font = Math.min(12, cell - 1);
  const root = svg("svg", { width: size, height: size, viewBox: `0 0 ${size} ${size}`, role: "img",
    "aria-label": `layer ${layer} head ${head} weights, queries down the left, keys across the top` });
  run.tokens.forEach((t, i) => {
    root.append(svg("text", { x: margin - 4, y: margin + (i + 0.5) * cell, "text-anchor": "end", "dominant-baseline": "middle", "font-size": font, class: "zoom-label" }, short(t)));
    const x = margin + (i + 0.5) * cell;
    root.append(svg("text", { x, y: margin - 4, transform: `rotate(-60 ${x} ${margin - 4})`, "font-size": font, class: "zoom-label" }, short(t)));
  });
  w.forEach((row, i) => row.forEach((x, j) => {
    const shade = Math.round(255 * (1 - Math.min(1, x)));
    const rect = svg("rect", { x: margin + j * cell, y: margin + i * cell, width: cell, height: cell,
      fill: `rgb(${shade},${shade},${255 - Math.round((255 - shade) * 0.2)})`, "data-row": i, "data-col": j });
    rect.append(svg("title", {}, `query ${i} ${quoted(run.tokens[i])} → key ${j} ${quoted(run.tokens[j])}: weight ${fmt(x)}`));
    root.append(rect);
  }));
  fig.querySelector(".zoom-box").replaceChildren(root);
  fig.querySelector("figcaption").textContent = `Layer ${layer}, head ${head} (the head picked above), its tokens on both axes: queries down the left, keys across the top; a square's tooltip gives its weight.`;
}

// -- the heatmaps' hover: query, key and weight under the pointer --------------------------------
function hover(event) {
  const canvas = event.target.closest("canvas");
  const fig = canvas?.closest("figure[data-layer]");
  const tip = $("#inside-tip");
  if (!fig || !run) { tip.hidden = true; return; }
  const w = run.weights[Number(fig.dataset.layer)][Number(fig.dataset.head)];
  const r = canvas.getBoundingClientRect();
  const n = w.length;
  const i = Math.min(n - 1, Math.floor(((event.clientY - r.top) / r.height) * n));
  const j = Math.min(n - 1, Math.floor(((event.clientX - r.left) / r.width) * n));
  tip.textContent = `L${fig.dataset.layer}H${fig.dataset.head}: query ${i} ${quoted(run.tokens[i])} → key ${j} ${quoted(run.tokens[j])}: weight ${fmt(w[i][j])}`;
  tip.style.left = `${event.clientX + 12}px`;
  tip.style.top = `${event.clientY + 12}px`;
  tip.hidden = false;
}

export function tables() {
  if (!run || !lens) return [];
  const cols = lens.tokens.map((t, j) => `${j}: ${quoted(t)}`);
  const rows = lens.top.map((_, l) => `layer ${l}`);
  const out = [
    { title: "Logit lens: the top token's id", rows, cols, values: lens.top, image: false },
    { title: "Logit lens: the top token's probability", rows, cols, values: lens.p },
  ];
  if (attr) {
    const names = [...attr.heads.flatMap((row, l) => row.map((_, h) => `L${l}H${h}`)), ...Object.keys(attr.parts)];
    const values = [...attr.heads.flat(), ...Object.values(attr.parts)].map((x) => [x]);
    out.push({ title: `Attribution of the logit of ${quoted(attr.token_text)} (id ${attr.token}) at position ${attr.position}`, rows: names, cols: ["share of the logit"], values });
  }
  if (knocked && state.off.length) {
    out.push({ title: `Prediction at position ${knocked.position} with ${state.off.join(", ")} knocked out`, rows: knocked.before.map((_, i) => `rank ${i + 1}`),
      cols: ["id before", "p before", "p after of that id", "id after", "p after"],
      values: knocked.before.map((b, i) => [b.id, b.p, knocked.after_of_before[i], knocked.after[i].id, knocked.after[i].p]) });
  }
  return out;
}

export const exportState = () => (run ? { position: position(), token: state.tok, knocked_out: state.off.join(",") } : {});

function build() {
  return [
    el("h3", { text: "The picked head, with its tokens" }),
    el("figure", { id: "inside-zoom", class: "inside-zoom", hidden: true },
      el("div", { class: "zoom-box", tabindex: "0", role: "region", "aria-label": "The picked head's weights (scrolls)" }), el("figcaption", { class: "note" })),
    el("h3", { text: "Inside the model" }),
    el("form", { id: "inside-form", class: "learned-form", onsubmit: pickForm },
      el("label", {}, "Position read ", el("input", { name: "pos", type: "number", min: "0" })),
      el("label", {}, "Token id split ", el("input", { name: "tok", type: "number", min: "0", placeholder: "top prediction" })),
      el("button", { type: "submit" }, "Show inside")),
    el("p", { id: "inside-error", class: "error", role: "alert", hidden: true }),
    el("h4", { text: "Logit lens" }),
    el("p", { class: "note", text: "Each layer's residual stream read as if it were the last layer's. Click a position's number to read it below." }),
    el("div", { class: "lens-wrap", tabindex: "0", role: "region", "aria-label": "Logit lens grid (scrolls sideways)" }, el("table", { id: "inside-lens", class: "lens" })),
    el("h4", { text: "Logit attribution" }),
    el("p", { id: "inside-attr-note", class: "note", "aria-live": "polite" }),
    el("ol", { id: "inside-attr", class: "attr-bars" }),
    el("h4", { text: "Knock heads out" }),
    el("div", { id: "inside-heads", role: "group", "aria-label": "Heads to knock out" }),
    el("p", { id: "inside-ablate-note", class: "note", "aria-live": "polite" }),
    el("table", { id: "inside-ablate", class: "data" }),
    el("h4", { text: "Generate" }),
    el("form", { id: "inside-gen", class: "learned-form", onsubmit: generate },
      el("label", {}, "New tokens ", el("input", { name: "new", type: "number", min: "1", max: String(limits.new_max), value: String(limits.new_default) })),
      el("button", { type: "submit", id: "inside-go" }, "Generate"),
      el("button", { type: "button", id: "inside-stop", disabled: true, onclick: () => stop(`Stopped after ${$("#inside-out").querySelectorAll(".new-token").length} tokens.`) }, "Stop")),
    el("p", { id: "inside-out", class: "generated", "aria-live": "polite" }),
    el("p", { id: "inside-gen-note", class: "note", role: "status" }),
    el("p", { id: "inside-tip", class: "inside-tip", hidden: true, "aria-hidden": "true" }),
  ];
}

export function init(section) {
  root = section;
  box = section.querySelector("#model-inside");
  if (!box) return;
  const ready = config().then((cfg) => { limits = cfg.inside; box.replaceChildren(...build()); });
  root.addEventListener("modelshown", (event) => ready.then(() => {
    const changed = !run || run.model !== event.detail.model || run.ids.join() !== event.detail.ids.join();
    run = event.detail;
    if (changed) { asked = { lens: null, attr: null, off: null }; stop(""); $("#inside-out").replaceChildren(); }
    readState();
    refresh();
  }));
  const layers = root.querySelector("#model-layers");
  layers.addEventListener("mousemove", hover);
  layers.addEventListener("mouseleave", () => { $("#inside-tip").hidden = true; });
}
