// The multi-head view's model mode: a Hugging Face model given to `attnlab serve --model PATH`,
// run on a text or token ids (GET /api/models/run): every layer x head as a small heatmap with its
// head score, and any head's query opened in the stepper (GET /api/models/head). The mode's chip
// shows only when GET /api/models lists a model; while one loads, its progress is polled.
// URL: mh.model (its name), mh.text or mh.ids, mh.kind (the score shown), mh.layer, mh.head,
// mh.query (a position, counted from 0 as the model counts).
// Past the server's grid_tokens (64) an answer holds one layer's weights, as bytes (round(255 w)):
// only that layer is drawn, each head at 2 px a token in a box that scrolls, and picking another
// layer asks for it (up to max_tokens, 512).
import { api, clearError, config, el, fmt, matrixTable, showError } from "./common.js";
import { heatTables } from "./heatmap.js";
import { readUrl, writeUrl } from "./state.js";
import { openLearned } from "./stepper.js";

let root = null;
const $ = (sel) => root.querySelector(sel);
let list = []; // GET /api/models: [{ name, status, message, seconds, architecture, shape }]
let data = null; // the last answer of /api/models/run
let shown = null; // the request it answered, as URL entries
const pick = { layer: 0, head: 0, query: null, kind: null }; // null query: the last position

export const offered = () => list.length > 0;
const entry = (name) => list.find((m) => m.name === name) ?? list[0];

function drawHead(canvas, weights) {
  const n = weights.length;
  canvas.width = n;
  canvas.height = n;
  const ctx = canvas.getContext("2d");
  const img = ctx.createImageData(n, n);
  for (let i = 0; i < n; i++) {
    for (let j = 0; j < n; j++) {
      const shade = Math.round(255 * (1 - Math.min(1, weights[i][j])));
      img.data.set([shade, shade, 255 - Math.round((255 - shade) * 0.2), 255], 4 * (i * n + j));
    }
  }
  ctx.putImageData(img, 0, 0);
}

// The model's state in words: loading (seconds so far), ready (its shape) or failed (why).
function statusText(m) {
  if (m.status === "loading") return `${m.name}: loading… (${m.seconds} s so far)`;
  if (m.status === "failed") return `${m.name} failed to load: ${m.message}`;
  const s = m.shape;
  return `${m.name} (${m.architecture}): ${s.layers} layers × ${s.heads} heads of width ${s.head_dim} ` +
    `(${s.kv_heads} key/value heads), vocabulary ${s.vocab}; loaded in ${m.seconds} s. At most ${m.max_tokens} tokens.`;
}

// Ask for the models' states until the picked one is no longer loading.
async function settled(name) {
  for (;;) {
    list = (await api("/api/models")).models;
    const m = entry(name);
    root.dataset.model = m.status;
    $("#model-status").textContent = statusText(m);
    if (m.status !== "loading") return m;
    await new Promise((resolve) => setTimeout(resolve, 300)); // ask again in 0.3 s while it loads
  }
}

const label = (i) => `${i}: ${JSON.stringify(data.tokens[i])}`;
// A token as shown in the row: one of only spaces (or empty) in quotes, so it is never blank.
const shownToken = (t) => (t.trim() === "" ? JSON.stringify(t) : t);
const long = () => data.weights_u8 !== undefined;

// One layer's bytes (h base64 strings of N x N) as h arrays of N rows of weights in [0, 1].
function unpack(heads, n) {
  return heads.map((b64) => {
    const bytes = Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));
    return [...Array(n).keys()].map((i) => Array.from(bytes.subarray(i * n, (i + 1) * n), (x) => x / 255));
  });
}

function sequence() {
  const parts = data.tokens.map((t, i) => el("span", { class: i === pick.query ? "query" : null, title: `position ${i}, id ${data.ids[i]}`, "data-position": i }, shownToken(t)));
  $("#model-seq").replaceChildren(`Tokens (${data.tokens.length}): `, ...parts.flatMap((p) => [p, " "]), " (outlined: the query)");
}

// The heads with the highest score of the kind shown: at most three, each above a third.
function strongest() {
  const all = data.scores[pick.kind].flatMap((row, l) => row.map((x, h) => ({ l, h, x }))).filter((s) => s.x !== null);
  return all.sort((a, b) => b.x - a.x).slice(0, 3).filter((s) => s.x > 1 / 3).map((s) => `${s.l},${s.h}`);
}

function headFigure(l, h, weights, strong) {
  const n = weights.length;
  const score = (kind) => data.scores[kind][l][h];
  const canvas = el("canvas", { "aria-label": `layer ${l} head ${h} attention weights` });
  drawHead(canvas, weights);
  canvas.addEventListener("click", (event) => {
    const box = canvas.getBoundingClientRect();
    choose({ layer: l, head: h, query: Math.min(n - 1, Math.floor(((event.clientY - box.top) / box.height) * n)) });
  });
  const picked = pick.layer === l && pick.head === h;
  const row = el("div", { class: "learned-row", style: `top:${(100 * pick.query) / n}%;height:${100 / n}%`, "aria-hidden": "true" });
  const all = data.score_kinds.map((k) => `${k.replace("_", "-")} ${score(k) === null ? "none" : fmt(score(k))}`).join(", ");
  const cls = ["model-head", picked ? "picked" : "", strong.includes(`${l},${h}`) ? "strong" : ""].join(" ").trim();
  if (long()) canvas.style.width = `${2 * n}px`; // 2 px a token; the box around it scrolls
  return el("figure", { class: cls, title: `layer ${l} head ${h}: ${all}`, "data-layer": l, "data-head": h },
    el("div", { class: "model-scroll" }, el("div", { class: "learned-canvas" }, canvas, picked ? row : null)),
    el("figcaption", { text: `h${h} ${score(pick.kind) === null ? "–" : fmt(score(pick.kind))}` }));
}

function layers() {
  const strong = strongest();
  const note = long() ? [el("p", { class: "note", text: `${data.tokens.length} tokens: one layer at a time (pick it under the heatmaps), each head scrolls.` })] : [];
  $("#model-layers").replaceChildren(...note, ...data.weights.flatMap((layer, l) => layer === null ? [] : [
    el("h4", { text: `Layer ${l} (${data.kinds[l]})` }),
    el("div", { class: long() ? "model-layer long" : "model-layer" }, layer.map((w, h) => headFigure(l, h, w, strong))),
  ]));
}

function summary() {
  const row = data.weights[pick.layer][pick.head][pick.query];
  const top = row.indexOf(Math.max(...row));
  $("#model-pick-note").textContent = `Layer ${pick.layer}, head ${pick.head}, query at position ${label(pick.query)}: ` +
    `its largest weight, ${fmt(row[top])}, is on position ${label(top)}.`;
  pickMap();
}

// A token as a row or column name: its 0-based position and its text, spaces made visible.
const named = (i) => `${i} ${(data.tokens[i] || "∅").replace(/ /g, "␣").replace(/\n/g, "⏎").replace(/\t/g, "⇥")}`;

// The picked head's weights with its tokens on both axes: queries down, keys across. Wider than
// the config's heatmap_columns it is shaded as a heatmap (each cell's number its title), else its
// numbers show.
function pickMap() {
  const names = data.tokens.map((_, i) => named(i));
  const table = matrixTable({ caption: `Layer ${pick.layer}, head ${pick.head}: each query's weights on the keys`,
    rows: names, cols: names, values: data.weights[pick.layer][pick.head] });
  table.querySelectorAll(`tbody tr:nth-child(${pick.query + 1}) th`).forEach((th) => th.classList.add("picked-row"));
  $("#model-pick-map").replaceChildren(table);
  config().then((c) => heatTables($("#model-pick-map"), true, c.stepper.heatmap_columns));
}

// The picked head as BertViz's head view draws it: tokens twice, queries left and keys right, a
// line from each query to each key with opacity = weight (the picked query's lines in orange).
const SVG = "http://www.w3.org/2000/svg";
function svg(tag, attrs, text) {
  const node = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, String(v));
  if (text !== undefined) node.textContent = text;
  return node;
}

function headLines() {
  const weights = data.weights[pick.layer][pick.head];
  const n = weights.length;
  const step = 18, left = 110, right = 290; // px: a row per token, the two columns of words
  const picture = svg("svg", { viewBox: `0 0 400 ${n * step + 8}`, role: "img",
    "aria-label": `layer ${pick.layer} head ${pick.head}: each query's weights on the keys as lines` });
  const y = (i) => 4 + step * i + step / 2;
  for (let i = 0; i < n; i++) {
    for (let j = 0; j < n; j++) {
      const w = weights[i][j];
      if (w < 0.01 && i !== pick.query) continue; // too faint to see: leave it out
      const on = i === pick.query;
      picture.append(svg("line", { x1: left + 4, y1: y(i), x2: right - 4, y2: y(j), class: on ? "query" : "",
        "stroke-opacity": Math.min(1, on ? w : 0.6 * w), "stroke-width": on ? 2 : 1.5, "data-query": i, "data-key": j }));
    }
  }
  data.tokens.forEach((t, i) => {
    const cls = i === pick.query ? "query" : "";
    const word = t.length > 12 ? `${t.slice(0, 11)}…` : t;
    picture.append(svg("text", { x: left, y: y(i) + 4, "text-anchor": "end", class: cls }, word));
    picture.append(svg("text", { x: right, y: y(i) + 4, class: cls }, word));
  });
  $("#model-lines-svg").replaceChildren(picture);
}

function controls() {
  const form = $("#model-open").elements;
  const options = (n, word) => [...Array(n).keys()].map((i) => el("option", { value: i, text: `${word} ${i}` }));
  form.layer.replaceChildren(...options(data.weights.length, "layer"));
  form.head.replaceChildren(...options(data.heads, "head"));
  form.query.max = String(data.tokens.length - 1);
  form.layer.value = String(pick.layer);
  form.head.value = String(pick.head);
  form.query.value = String(pick.query);
  const kind = $("#model-form").elements.kind;
  if ([...kind.options].map((o) => o.value).join() !== data.score_kinds.join()) {  // an encoder's kinds differ
    kind.replaceChildren(...data.score_kinds.map((k) => el("option", { value: k, text: k.replace("_", "-") })));
  }
  kind.value = pick.kind;
}

function render() {
  pick.layer = Math.min(pick.layer, data.weights.length - 1);
  if (data.weights[pick.layer] === null) pick.layer = data.layer; // the layer this answer holds
  pick.head = Math.min(pick.head, data.heads - 1);
  pick.query = Math.min(pick.query ?? data.tokens.length - 1, data.tokens.length - 1);
  pick.kind = data.score_kinds.includes(pick.kind) ? pick.kind : data.score_kinds[0];
  controls();
  sequence();
  layers();
  summary();
  headLines();
  root.dataset.model = "shown";
  root.dispatchEvent(new CustomEvent("modelshown", { detail: data })); // js/inside.js follows it
}

// entries: the request's URL entries { "mh.model", "mh.text", "mh.ids" }.
async function load(entries) {
  try {
    const m = await settled(entries["mh.model"]);
    if (m.status !== "ready") return false;
    const params = new URLSearchParams({ model: m.name, layer: pick.layer });
    if (entries["mh.ids"]) params.set("ids", entries["mh.ids"].replaceAll(",", " "));
    else if (entries["mh.text"]) params.set("text", entries["mh.text"]);
    let answer = await api(`/api/models/run?${params}`);
    if (answer.weights_u8 !== undefined && answer.layer !== pick.layer) { // a layer past the model's: its first
      params.set("layer", 0);
      answer = await api(`/api/models/run?${params}`);
    }
    if (answer.weights_u8 !== undefined) {
      answer.weights = answer.kinds.map((_, l) => (l === answer.layer ? unpack(answer.weights_u8, answer.ids.length) : null));
    }
    data = answer;
  } catch (err) {
    showError($("#model-error"), err);
    return false;
  }
  clearError($("#model-error"));
  shown = entries;
  render();
  return true;
}

const pickEntries = () => ({ "mh.layer": pick.layer, "mh.head": pick.head, "mh.query": pick.query, "mh.kind": pick.kind === data.score_kinds[0] ? null : pick.kind });

async function choose(next, { push = true } = {}) {
  Object.assign(pick, next);
  if (data.weights[pick.layer] === null && !(await load(shown))) return; // a long input's other layer
  render();
  writeUrl(pickEntries(), { push });
}

async function show(event) {
  event.preventDefault();
  const form = new FormData($("#model-form"));
  const ids = String(form.get("ids") || "").trim().split(/[\s,]+/).filter(Boolean).join(",");
  const text = ids ? null : String(form.get("text") || "") || null;
  const entries = { "mh.model": String(form.get("model") || list[0].name), "mh.text": text, "mh.ids": ids || null };
  pick.query = null; // a new text opens on its last position
  if (await load(entries)) writeUrl({ ...entries, "mh.model": entries["mh.model"] === list[0].name ? null : entries["mh.model"], ...pickEntries() });
}

async function openInStepper(event) {
  event.preventDefault();
  const form = $("#model-open").elements;
  const query = Number(form.query.value);
  if (!Number.isInteger(query) || query < 0 || query >= data.tokens.length) {
    showError($("#model-error"), new Error(`query: expected a position from 0 to ${data.tokens.length - 1}, but got “${form.query.value}”`));
    return;
  }
  await choose({ layer: Number(form.layer.value), head: Number(form.head.value), query }, { push: false });
  const ref = { layer: pick.layer, head: pick.head, query: pick.query, tokens: data.ids, checkpoint: null, model: data.model };
  clearError($("#model-error"));
  if (await openLearned(ref)) {
    const stepper = document.getElementById("figure-attention-stepper");
    stepper.scrollIntoView({ block: "start" });
    stepper.focus({ preventScroll: true });
  } else {
    showError($("#model-error"), new Error(document.getElementById("stepper-error").textContent));
  }
}

// Read the URL again (the mode opened, Back and Forward): fetch only when the request changed.
export async function restore() {
  const whole = (key) => { const x = Number(readUrl(key) ?? NaN); return Number.isInteger(x) && x >= 0 ? x : null; };
  pick.layer = whole("mh.layer") ?? 0;
  pick.head = whole("mh.head") ?? 0;
  pick.query = whole("mh.query");
  pick.kind = readUrl("mh.kind");
  const entries = { "mh.model": entry(readUrl("mh.model")).name, "mh.text": readUrl("mh.ids") ? null : readUrl("mh.text"), "mh.ids": readUrl("mh.ids") };
  const form = $("#model-form").elements;
  form.model.value = entries["mh.model"];
  form.text.value = entries["mh.text"] ?? "";
  form.ids.value = (entries["mh.ids"] || "").replaceAll(",", " ");
  if (!data || JSON.stringify(entries) !== JSON.stringify(shown)) await load(entries);
  else render();
}

export function tableData() {
  if (!data) return { caption: "No model run shown yet.", state: { mode: "model" }, tables: [] };
  const labels = data.tokens.map((_, i) => label(i));
  const heads = data.kinds.flatMap((_, l) => [...Array(data.heads).keys()].map((h) => [l, h]));
  return {
    caption: `Heads of ${data.model} on ${data.tokens.length} tokens: layer ${pick.layer}, head ${pick.head}.`,
    state: { mode: "model", model: data.model, ids: data.ids.join(" "), layer: pick.layer, head: pick.head, query: pick.query },
    tables: [
      { title: "Each head's scores", rows: heads.map(([l, h]) => `layer ${l} head ${h}`), cols: data.score_kinds,
        values: heads.map(([l, h]) => data.score_kinds.map((k) => data.scores[k][l][h])) },
      { title: `Layer ${pick.layer}, head ${pick.head} weights (${long() ? "to 1/255" : "rounded to 4 places"})`, rows: labels, cols: labels, values: data.weights[pick.layer][pick.head], image: false },
    ],
  };
}

// Find the server's models; without any, the mode stays hidden and nothing else happens.
export async function init(section) {
  root = section;
  try {
    list = (await api("/api/models")).models;
  } catch {
    list = []; // a saved copy of the page has no server to run a model
  }
  if (!offered()) return;
  document.getElementById("mh-mode-model").hidden = false;
  const form = $("#model-form").elements;
  form.model.replaceChildren(...list.map((m) => el("option", { value: m.name, text: m.name })));
  $("#model-pick").hidden = list.length === 1;
  $("#model-form").addEventListener("submit", show);
  form.kind.addEventListener("change", () => choose({ kind: form.kind.value }));
  $("#model-open").addEventListener("submit", openInStepper);
  for (const name of ["layer", "head", "query"]) {
    $("#model-open").elements[name].addEventListener("change", (event) => {
      const x = Number(event.target.value);
      if (Number.isInteger(x) && x >= 0 && (name !== "query" || x < data.tokens.length)) choose({ [name]: x });
    });
  }
}
