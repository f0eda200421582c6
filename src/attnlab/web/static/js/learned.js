// The multi-head view's learned mode: the shipped induction model's heads on one sequence
// (GET /api/learned), a slider over its training checkpoints, and any head's query opened in the
// stepper (GET /api/learned/head, or /api/runs/{id}/learned/head for a model trained on this page).
// Every number (weights, predictions, labels, scores) comes
// from the server. URL: mh.tokens (typed ids) or mh.seed (a generated sequence), mh.checkpoint,
// mh.layer, mh.head, mh.query (a position, counted from 0 as the model counts).
import { api, clearError, el, fmt, showError } from "./common.js";
import { readUrl, writeUrl } from "./state.js";
import { openLearned } from "./stepper.js";

let root = null;
const $ = (sel) => root.querySelector(sel);
let data = null; // the last answer of /api/learned
let shown = null; // the request it answered, as URL entries
const pick = { layer: 1, head: 0, query: null }; // the head and query the stepper would open (null: firstRepeat)

function drawHead(canvas, weights) {
  const n = weights.length;
  canvas.width = n;
  canvas.height = n;
  const ctx = canvas.getContext("2d");
  const img = ctx.createImageData(n, n);
  for (let i = 0; i < n; i++) {
    for (let j = 0; j < n; j++) {
      const shade = Math.round(255 * (1 - Math.min(1, weights[i][j])));
      const at = 4 * (i * n + j);
      img.data.set([shade, shade, 255 - Math.round((255 - shade) * 0.2), 255], at);
    }
  }
  ctx.putImageData(img, 0, 0);
}

// A position to open on: the first token of a generated sequence's repeated half, or of a typed
// one the first token seen before, where an induction head has an earlier copy to look past;
// else the last position.
function firstRepeat(tokens, repeat) {
  if (repeat) return tokens.length - repeat;
  const at = tokens.findIndex((t, i) => tokens.indexOf(t) < i);
  return at < 0 ? tokens.length - 1 : at;
}

// Each token, marked ✓ (and green) when the model, reading up to the token before, predicted it.
function sequence() {
  const n = data.tokens.length;
  const start = data.repeat ? n - data.repeat : n;
  const parts = data.tokens.map((t, i) => {
    const hit = i > 0 && data.predictions !== null && data.predictions[i - 1] === t;
    const cls = [i >= start ? "copy" : "", hit ? "hit" : "", i === pick.query ? "query" : ""].join(" ").trim();
    const said = hit ? " (predicted right from the tokens before)" : "";
    const next = data.predictions === null ? "" : `, predicts ${data.predictions[i]}`;
    return el("span", { class: cls || null, title: `position ${i}${said}${next}`, "data-position": i }, String(t), hit ? el("b", { class: "mark", text: "✓" }) : null);
  });
  const copy = data.repeat ? `the last ${data.repeat} tokens (shaded) repeat the ${data.repeat} before them; ` : "";
  const right = data.predictions === null ? `no ✓ marks: ${data.predictions_note}` : "green ✓: the model predicted this token from the ones before it";
  $("#learned-seq").replaceChildren("Tokens: ", ...parts.flatMap((p) => [p, " "]), ` (${copy}${right}; outlined: the query)`);
}

function headFigure(l, h, weights) {
  const info = data.heads.find((x) => x.layer === l && x.head === h);
  const n = weights.length;
  const canvas = el("canvas", { "aria-label": `layer ${l} head ${h} attention weights` });
  drawHead(canvas, weights);
  // A click on a row picks this head and that query (the row's position).
  canvas.addEventListener("click", (event) => {
    const box = canvas.getBoundingClientRect();
    choose({ layer: l, head: h, query: Math.min(n - 1, Math.floor(((event.clientY - box.top) / box.height) * n)) });
  });
  const picked = pick.layer === l && pick.head === h;
  const row = el("div", { class: "learned-row", style: `top:${(100 * pick.query) / n}%;height:${100 / n}%`, "aria-hidden": "true" });
  return el("figure", { class: picked ? "learned-head picked" : "learned-head", "data-pattern": info.pattern, "data-layer": l, "data-head": h },
    el("div", { class: "learned-canvas" }, canvas, picked ? row : null),
    el("figcaption", { text: `head ${h}: ${info.pattern} (previous-token ${info.previous_token}, induction ${info.induction_score})` }));
}

function layers() {
  $("#learned-layers").replaceChildren(...data.weights.flatMap((layer, l) => [
    el("h4", { text: `Layer ${l}` }),
    el("div", { class: "learned-layer" }, layer.map((w, h) => headFigure(l, h, w))),
  ]));
}

// The picked head's row for the query, in words: where its largest weight goes.
function summary() {
  const row = data.weights[pick.layer][pick.head][pick.query];
  const top = row.indexOf(Math.max(...row));
  $("#learned-pick").textContent = `Layer ${pick.layer}, head ${pick.head}, query at position ${pick.query} (token ${data.tokens[pick.query]}): ` +
    `its largest weight, ${fmt(row[top])}, is on position ${top} (token ${data.tokens[top]}).`;
}

function controls() {
  const form = $("#learned-open").elements;
  const { layers: nl, heads: nh } = data.config;
  form.layer.replaceChildren(...[...Array(nl).keys()].map((l) => el("option", { value: l, text: `layer ${l}` })));
  form.head.replaceChildren(...[...Array(nh).keys()].map((h) => el("option", { value: h, text: `head ${h}` })));
  form.query.max = String(data.tokens.length - 1);
  form.layer.value = String(pick.layer);
  form.head.value = String(pick.head);
  form.query.value = String(pick.query);
  const slider = $("#learned-form").elements.checkpoint;
  slider.max = String(data.checkpoints.length - 1);
  slider.value = String(data.checkpoint);
  const step = data.checkpoints[data.checkpoint];
  $("#learned-step").textContent = data.checkpoint === data.checkpoints.length - 1 ? `${step ?? ""} (trained)` : String(step);
}

function render() {
  pick.layer = Math.min(pick.layer, data.config.layers - 1);
  pick.head = Math.min(pick.head, data.config.heads - 1);
  pick.query = Math.min(pick.query ?? firstRepeat(data.tokens, data.repeat), data.tokens.length - 1);
  controls();
  sequence();
  layers();
  summary();
  root.dataset.learned = "ready";
  root.dispatchEvent(new CustomEvent("learned:shown", { detail: current() }));
}

// What the view shows: its answer and the run whose model it is (null: the shipped model).
export const current = () => (data ? { data, run: shown?.["mh.run"] || null } : null);

// entries: the request's URL entries { "mh.tokens", "mh.seed", "mh.checkpoint" }.
async function load(entries) {
  const params = new URLSearchParams();
  if (entries["mh.tokens"]) params.set("tokens", entries["mh.tokens"].replaceAll(",", " "));
  else params.set("seed", entries["mh.seed"] ?? "0");
  if (entries["mh.checkpoint"] !== null && !entries["mh.run"]) params.set("checkpoint", entries["mh.checkpoint"]);
  // mh.run: a model trained on this page (js/runs.js) instead of the shipped one
  const base = entries["mh.run"] ? `/api/runs/${encodeURIComponent(entries["mh.run"])}/learned` : "/api/learned";
  try {
    data = await api(`${base}?${params}`);
  } catch (err) {
    showError($("#learned-error"), err);
    return false;
  }
  clearError($("#learned-error"));
  shown = entries;
  render();
  return true;
}

const pickEntries = () => ({ "mh.layer": pick.layer, "mh.head": pick.head, "mh.query": pick.query });

function choose(next, { push = true } = {}) {
  Object.assign(pick, next);
  render();
  writeUrl(pickEntries(), { push });
}

async function show(event) {
  event.preventDefault();
  const form = new FormData($("#learned-form"));
  const tokens = String(form.get("tokens") || "").trim().split(/[\s,]+/).filter(Boolean).join(",");
  const entries = { "mh.tokens": tokens || null, "mh.seed": tokens ? null : String(form.get("seed") || "0"), "mh.checkpoint": null, "mh.run": shown?.["mh.run"] ?? null };
  pick.query = null; // a new sequence opens on its own first repeated token
  if (await load(entries)) writeUrl({ ...entries, ...pickEntries() });
}

async function slide(commit) {
  const index = Number($("#learned-form").elements.checkpoint.value);
  const entries = { ...shown, "mh.checkpoint": index === data.checkpoints.length - 1 ? null : String(index) };
  if (await load(entries) && commit) writeUrl(entries);
}

async function openInStepper(event) {
  event.preventDefault();
  const form = $("#learned-open").elements;
  const query = Number(form.query.value);
  if (!Number.isInteger(query) || query < 0 || query >= data.tokens.length) {
    showError($("#learned-error"), new Error(`query: expected a position from 0 to ${data.tokens.length - 1}, but got “${form.query.value}”`));
    return;
  }
  choose({ layer: Number(form.layer.value), head: Number(form.head.value), query }, { push: false });
  // A model trained on this page (mh.run) opens by its run: the server reads that run's weights.
  const run = shown?.["mh.run"] || null;
  const ref = { ...pick, tokens: data.tokens, checkpoint: run || data.checkpoint === data.checkpoints.length - 1 ? null : data.checkpoint, run };
  if (await openLearned(ref)) {
    const stepper = document.getElementById("figure-attention-stepper");
    stepper.scrollIntoView({ block: "start" });
    stepper.focus({ preventScroll: true });
  }
}

// Read the URL again (first start, Back and Forward): fetch only when the sequence changed.
export async function restore() {
  const whole = (key) => { const x = Number(readUrl(key) ?? NaN); return Number.isInteger(x) && x >= 0 ? x : null; };
  pick.layer = whole("mh.layer") ?? 1;
  pick.head = whole("mh.head") ?? 0;
  pick.query = whole("mh.query"); // null: the first repeated token of whatever sequence loads
  const entries = { "mh.tokens": readUrl("mh.tokens"), "mh.seed": readUrl("mh.tokens") ? null : readUrl("mh.seed") ?? "0", "mh.checkpoint": readUrl("mh.checkpoint"), "mh.run": readUrl("mh.run") };
  const form = $("#learned-form").elements;
  form.tokens.value = (entries["mh.tokens"] || "").replaceAll(",", " ");
  form.seed.value = entries["mh.seed"] ?? "0";
  if (!data || JSON.stringify(entries) !== JSON.stringify(shown)) await load(entries);
  else render();
}

export function tableData() {
  const w = data.weights[pick.layer][pick.head];
  const labels = data.tokens.map((t, i) => `${i}: ${t}`);
  return {
    caption: `Learned heads of the shipped induction model on ${data.tokens.length} tokens, checkpoint ${data.checkpoint} (step ${data.checkpoints[data.checkpoint]}): layer ${pick.layer}, head ${pick.head}.`,
    state: { mode: "learned", tokens: data.tokens.join(" "), checkpoint: data.checkpoint, layer: pick.layer, head: pick.head, query: pick.query },
    tables: [
      { title: "Each head's label and scores", rows: data.heads.map((x) => `layer ${x.layer} head ${x.head} (${x.pattern})`), cols: ["previous-token", "induction"], values: data.heads.map((x) => [x.previous_token, x.induction_score]) },
      { title: `Layer ${pick.layer}, head ${pick.head} weights (rounded to 4 places)`, rows: labels, cols: labels, values: w, image: false },
    ],
    // The picture draws every head's weights as the page does, not the picked head's numbers.
    heatmaps: data.weights.flatMap((layer, l) => layer.map((weights, h) => ({ title: `layer ${l} head ${h}: ${data.heads.find((x) => x.layer === l && x.head === h).pattern}`, values: weights }))),
  };
}

export function init(section) {
  root = section;
  $("#learned-form").addEventListener("submit", show);
  const slider = $("#learned-form").elements.checkpoint;
  slider.addEventListener("input", () => slide(false)); // dragging: redraw only
  slider.addEventListener("change", () => slide(true)); // let go (or an arrow key): a history entry
  $("#learned-open").addEventListener("submit", openInStepper);
  for (const name of ["layer", "head", "query"]) {
    $("#learned-open").elements[name].addEventListener("change", (event) => {
      const x = Number(event.target.value);
      if (Number.isInteger(x) && x >= 0 && (name !== "query" || x < data.tokens.length)) choose({ [name]: x });
    });
  }
}
