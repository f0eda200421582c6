// Figure attention-stepper: walk one attention call table by table (numbers from POST /api/trace),
// forward to the output and then backward through the gradients dV, dA, dS, dQ and dK.
// The figure always shows the last input the server accepted; a refused one leaves it marked
// stale, with the refusal named, until an accepted input replaces it.
import { api, clearError, config, digitsShown, el, fmt, formatNumber, grouped, isMasked, matrixTable, showError } from "./common.js";
import { figureTools } from "./export.js";
import { heatTables } from "./heatmap.js";
import { player } from "./play.js";
import { isPresenting } from "./present.js";
import { listFromUrl, matrixFromUrl, matrixToUrl, onUrlChange, readUrl, writeUrl } from "./state.js";
import { checkEntry, makeEditable, parseMatrix, toText } from "./stepper-input.js";

let cfg = null; // the worked example and the limits, from GET /api/config (set in init)
let stages = []; // the steps of the pass (name, phase, what a row is), GET /api/config's stages
let saturated = null; // a row is saturated past this largest weight (the histogram's threshold)

const root = document.getElementById("figure-attention-stepper");
const $ = (sel) => root.querySelector(sel);
// The accepted input (what the figure shows), where the reader is, and the server's answer.
// grad_output: the upstream gradient dO of the backward steps; null means all ones.
// softcap, sink: a real model's head's cap (Gemma 2) and sink logit (gpt-oss); null for none.
// query_labels, key_labels: a real or learned head's row names (0-based position and token).
const state = { q: [], k: [], v: [], causal: true, scaled: true, blocked: [], grad_output: null, softcap: null, sink: null, query_labels: null, key_labels: null, step: 0, sel: { i: 1, j: 0 }, fig: null };
// The variants and a head's labels off: the chapter's example, typed or random input.
const PLAIN = { softcap: null, sink: null, query_labels: null, key_labels: null };

const sub = (n) => String(n + 1);
// A query's and a key's name in the words below the tables: a head's own label (its 0-based
// position and token) where it has one, else the chapter's "query 1", "key 2".
const qname = (i) => (state.fig?.tables.q.rows[i] && state.query_labels ? `query ${state.fig.tables.q.rows[i]}` : `query ${sub(i)}`);
const rname = (i) => (state.query_labels ? `row ${state.fig.tables.q.rows[i]}` : `row ${sub(i)}`);
const kname = (j) => (state.key_labels ? `key ${state.fig.tables.k.rows[j]}` : `key ${sub(j)}`);
const NAMES = { q: "Q", k: "K", v: "V", grad_output: "dO" };
// The steps of the pass (name, phase, what a row is), from GET /api/config's stages.
const stageOf = (name) => stages.find((s) => s.name === name);
// A table with one row per query after the mask: an empty query row (no allowed key) leaves it
// without numbers there (the scores, the masked row of −∞ and dO do not depend on the weights).
const rowTable = (name) => { const s = stageOf(name); return Boolean(s) && s.rows === "query" && !["scores", "scaled", "masked", "grad_output"].includes(name); };

// -- which entries feed entry (i, j) of the current step's result ---------------------------
// "first" is the step's first input. qk: A Bᵀ, av: A B, ta: Aᵀ B (see figures/_steps.py).
function feeds(step, tableName, i, j) {
  const first = tableName === step.inputs[0];
  switch (step.feeds) {
    case "qk": return (r) => (first ? r.i === i : r.i === j);
    case "av": return (r) => (first ? r.i === i : r.j === j);
    case "ta": return (r) => (first ? r.j === i : r.j === j);
    case "cell": return (r) => r.i === i && r.j === j;
    case "row": return (r) => r.i === i;
    default: return () => false;
  }
}

const rowError = (i) => state.fig.row_errors[i];
const currentStep = () => state.fig.steps[state.step];
const rowErrorFor = (name) => (rowTable(name) ? rowError : null);
const ones = () => state.fig.tables.grad_output.values.map((row) => row.map(() => 1));

function cellText(name, value) {
  if (stageOf(name)?.phase === "backward" && value === null) return { title: "no gradient: no query row has an allowed key" };
  return {};
}

function inputTable(step, name) {
  const t = state.fig.tables[name];
  const table = matrixTable({
    caption: t.label, rows: t.rows, cols: t.cols, values: t.values,
    rowError: rowErrorFor(name),
    cell: (r, c, value) => cellText(name, value),
  });
  table.dataset.table = name;
  table.classList.add("step-input");
  if (name === "mask") makeMaskButtons(table);
  const editable = name === "grad_output" || (!step.result && name in NAMES);
  if (editable) makeEditable(table, NAMES[name], (i, j, text, input) => editCell(name, i, j, text, input));
  return table;
}

function resultTable(step) {
  const t = state.fig.tables[step.result];
  const table = matrixTable({
    caption: t.label, rows: t.rows, cols: t.cols, values: t.values,
    rowError: rowErrorFor(step.result),
    cell: (r, c, value) => ({ tabindex: "-1", "aria-selected": "false", ...cellText(step.result, value) }),
  });
  table.dataset.table = step.result;
  table.classList.add("step-result");
  table.setAttribute("role", "grid");
  table.setAttribute("aria-label", `${t.label}: use the arrow keys to pick an entry`);
  table.addEventListener("keydown", onGridKey);
  // Hover previews the entry in place (nothing is redrawn, focus stays); a click pins it.
  table.addEventListener("click", (event) => {
    const td = event.target.closest("td[data-row]");
    if (td) select(+td.dataset.row, +(td.dataset.col ?? 0), true);
  });
  table.addEventListener("mouseover", (event) => {
    const td = event.target.closest("td[data-col]");
    if (td) highlight(+td.dataset.row, +td.dataset.col, false);
  });
  table.addEventListener("mouseleave", () => highlight(state.sel.i, state.sel.j, false));
  return table;
}

function makeMaskButtons(table) {
  table.querySelectorAll("td[data-col]").forEach((td) => {
    const i = +td.dataset.row;
    const j = +td.dataset.col;
    const byHand = state.blocked.some(([a, b]) => a === i && b === j);
    const byCausal = state.causal && j > i;
    const what = byCausal ? "blocked by the causal mask" : byHand ? "blocked by hand" : "allowed";
    const button = el("button", {
      type: "button", class: "mask-cell", "aria-pressed": byHand ? "true" : "false",
      "aria-label": `query ${i + 1}, key ${j + 1}: ${what}. Press to ${byHand ? "unblock" : "block"} by hand`,
      onclick: () => toggleBlocked(i, j),
    }, td.textContent, byHand ? el("span", { class: "mark", "aria-hidden": "true", text: " ✎" }) : null);
    td.textContent = "";
    td.append(button);
  });
}

async function toggleBlocked(i, j) {
  const blocked = state.blocked.filter(([a, b]) => !(a === i && b === j));
  if (blocked.length === state.blocked.length) blocked.push([i, j]);
  await submit({ ...inputs(), blocked });
  root.querySelector(`table[data-table="mask"] td[data-row="${i}"][data-col="${j}"] button`)?.focus();
}

// -- the explanation of the picked entry, written out -----------------------------------------
function detail(step, i, j) {
  const fig = state.fig;
  const T = fig.tables;
  if (!step.result) return `${T.q.rows.length} queries and ${T.k.rows.length} keys, d_k = ${fig.d_k}, d_v = ${T.v.cols.length}. Edit any entry of Q, K or V in its cell.`;
  if (fig.row_errors[i] && rowTable(step.result)) return `⚠ ${fig.row_errors[i]}.`;
  if (step.phase === "backward") return backwardDetail(step.result, i, j);
  const q = T.q.values[i];
  const k = T.k.values[j];
  switch (step.result) {
    case "scores":
      return `score of ${qname(i)} and ${kname(j)}: q${sub(i)} · k${sub(j)} = ${q.map((x, d) => `(${fmt(x)})(${fmt(k[d])})`).join(" + ")} = ${fmt(T.scores.values[i][j])}`;
    case "scaled":
      return `${fmt(T.scores.values[i][j])} × ${fmt(fig.scale)} = ${fmt(T.scaled.values[i][j])}`;
    case "capped":
      return `${fmt(fig.softcap)} · tanh(${fmt(T.scaled.values[i][j])} / ${fmt(fig.softcap)}) = ${fmt(T.capped.values[i][j])}: never past ±${fmt(fig.softcap)}`;
    case "masked": {
      const m = T.mask.values[i][j];
      const why = isMasked(m) ? (fig.causal && j > i ? `: ${kname(j)} comes after ${qname(i)}` : ": blocked by hand") : "";
      const before = (T.capped ?? T.scaled).values[i][j];
      return `${fmt(before)} + ${isMasked(m) ? "(-inf)" : "0"} = ${fmt(T.masked.values[i][j])}${why}`;
    }
    case "weights":
      if (T.sink) {
        const share = T.sink.values[i][1];
        return `softmax of ${rname(i)}, [${T.masked.values[i].map((x) => fmt(x)).join(", ")}] with the sink ${fmt(fig.sink)} in the divisor, gives [${T.weights.values[i].map((x) => fmt(x)).join(", ")}]: the weights add up to 1 − ${fmt(share)}, the sink's share.`;
      }
      return `softmax of ${rname(i)}, [${T.masked.values[i].map((x) => fmt(x)).join(", ")}], gives [${T.weights.values[i].map((x) => fmt(x)).join(", ")}]: the weights add up to 1.`;
    case "output":
      return `output ${sub(i)}, feature ${sub(j)}: weights of ${qname(i)} times column ${sub(j)} of V = ${T.weights.values[i].map((a, m) => `(${fmt(a)})(${fmt(T.v.values[m][j])})`).join(" + ")} = ${fmt(T.output.values[i][j])}`;
    default:
      return "";
  }
}

// A sum of products written out: "(a)(b) + (c)(d)", over the pairs [a, b] given.
const products = (pairs) => pairs.map(([a, b]) => `(${fmt(a)})(${fmt(b)})`).join(" + ") || "0";
// The query rows that have weights (an empty row sends no gradient back).
const openRows = () => state.fig.row_errors.map((e, r) => (e ? -1 : r)).filter((r) => r >= 0);

function backwardDetail(result, i, j) {
  const fig = state.fig;
  const T = fig.tables;
  const value = T[result].values[i][j];
  if (value === null) return "No query row has an allowed key, so nothing flows back.";
  const by = fig.scaled ? `1/√d_k = ${fmt(fig.scale)}` : "1";
  switch (result) {
    case "grad_v":
      return `dV for token ${sub(i)}, feature ${sub(j)}: column ${sub(i)} of A times column ${sub(j)} of dO = ${products(openRows().map((r) => [T.weights.values[r][i], T.grad_output.values[r][j]]))} = ${fmt(value)}`;
    case "grad_weights":
      return `dA for query ${sub(i)} and key ${sub(j)}: row ${sub(i)} of dO · row ${sub(j)} of V = ${products(T.grad_output.values[i].map((g, c) => [g, T.v.values[j][c]]))} = ${fmt(value)}`;
    case "grad_scores": {
      const a = T.weights.values[i][j];
      const delta = fig.grad_delta[i];
      if (isMasked(T.masked.values[i][j])) return `Key ${sub(j)} is blocked for query ${sub(i)}, so its weight is 0 and dS = 0 × (${fmt(T.grad_weights.values[i][j])} − ${fmt(delta)}) = 0: no gradient reaches a blocked score.`;
      return `δ_${sub(i)} = Σ_j A_${sub(i)}j dA_${sub(i)}j = ${fmt(delta)}; dS = A × (dA − δ) = ${fmt(a)} × (${fmt(T.grad_weights.values[i][j])} − ${fmt(delta)}) = ${fmt(value)}`;
    }
    case "grad_q":
      return `dQ for query ${sub(i)}, feature ${sub(j)}: ${by} × (row ${sub(i)} of dS · column ${sub(j)} of K) = ${fmt(fig.scale)} × [${products(T.grad_scores.values[i].map((d, c) => [d, T.k.values[c][j]]))}] = ${fmt(value)}`;
    case "grad_k":
      return `dK for token ${sub(i)}, feature ${sub(j)}: ${by} × (column ${sub(i)} of dS · column ${sub(j)} of Q) = ${fmt(fig.scale)} × [${products(openRows().map((r) => [T.grad_scores.values[r][i], T.q.values[r][j]]))}] = ${fmt(value)}`;
    default:
      return "";
  }
}

// The backward softmax step's working, row by row: δ, then dS = A ∘ (dA − δ).
function backWorking() {
  const T = state.fig.tables;
  return state.fig.grad_delta.map((delta, i) => {
    if (delta === null) return el("li", { "data-row": i }, `Row ${sub(i)}: no allowed key, so no gradient.`);
    const a = T.weights.values[i];
    const dA = T.grad_weights.values[i];
    const open = a.map((w, j) => (isMasked(T.masked.values[i][j]) ? null : j)).filter((j) => j !== null);
    const top = Math.max(...open.map((j) => a[j]));
    const note = open.length === 1
      ? " One allowed key: its weight is 1 whatever its score, so the whole row gets 0."
      : top > saturated ? ` One weight is ${fmt(top)}: the row is saturated, so its gradient is nearly 0.` : "";
    return el("li", { "data-row": i, "data-delta": String(delta) },
      el("strong", { text: `Row ${sub(i)}: ` }),
      `δ = ${products(open.map((j) => [a[j], dA[j]]))} = ${fmt(delta)}; dS = [${T.grad_scores.values[i].map((x) => fmt(x)).join(", ")}], which adds up to 0.${note}`);
  });
}

// Enough significant digits that each division, read as printed, gives the weight printed: a
// saturated row's 2081.3 / 2081.5 must not read "2081 / 2081 = 0.9999".
function divisionDigits(row) {
  const shown = (x, d) => Number(formatNumber(x, d));
  const ROUND_TRIP = 17; // float64 reads back exactly at 17 significant digits
  for (let d = digitsShown(); d < ROUND_TRIP; d++) {
    const right = row.exps.every((e, j) => e === null || fmt(shown(e, d) / shown(row.total, d)) === fmt(row.weights[j]));
    if (right) return d;
  }
  return ROUND_TRIP;
}

// The softmax step's working, row by row, from the server's numbers (fig.softmax).
function working() {
  const T = state.fig.tables;
  return state.fig.softmax.map((row, i) => {
    if (!row) return el("li", { "data-row": i }, `Row ${sub(i)}: no allowed key, so no weights.`);
    const shift = row.shift ? ` − ${fmt(row.shift)}` : "";
    const d = divisionDigits(row);
    const sunk = state.fig.sink !== null && state.fig.sink !== undefined; // the last entry is the sink's
    const keys = T.masked.values[i].length;
    const sinkExp = sunk ? `, sink: e^(${fmt(state.fig.sink)}${shift}) = ${formatNumber(row.exps[keys], d)}` : "";
    const exps = T.masked.values[i].map((x, j) => (isMasked(x) ? "e^(−∞) = 0" : `e^(${fmt(x)}${shift}) = ${formatNumber(row.exps[j], d)}`)).join(", ") + sinkExp;
    const divs = row.exps.map((e, j) => (e === null ? null : `${sunk && j === keys ? "sink's share " : ""}${formatNumber(e, d)} / ${formatNumber(row.total, d)} = ${fmt(row.weights[j])}`)).filter(Boolean).join(", ");
    const gap = row.gap === null ? "" : ` Gap between the top two scores: ${fmt(row.gap)}, so the top key gets e^${fmt(row.gap)} ≈ ${row.gap_ratio === null ? "more than 10^300" : Math.round(row.gap_ratio) >= 1e3 ? grouped(row.gap_ratio) : fmt(row.gap_ratio)} times the weight of the next.`;
    return el("li", { "data-row": i, "data-total": String(row.total), "data-gap-ratio": String(row.gap_ratio) },
      el("strong", { text: `${rname(i).replace("row", "Row")}: ` }), `${exps}; sum = ${formatNumber(row.total, d)}; ${divs}.${gap}`);
  });
}

// -- drawing ----------------------------------------------------------------------------------
function render(focusGrid = false) {
  const fig = state.fig;
  const steps = fig.steps;
  const step = currentStep();
  if (step.result) {
    const t = fig.tables[step.result];
    state.sel.i = Math.min(state.sel.i, t.rows.length - 1);
    state.sel.j = Math.min(state.sel.j, t.cols.length - 1);
  }
  $("#stepper-steps").replaceChildren(...steps.map((s, n) => el("li", { "data-phase": s.phase, class: s.phase !== steps[n - 1]?.phase && n ? "phase-start" : null },
    el("button", { type: "button", "aria-current": n === state.step ? "step" : false, onclick: () => go(n, true) }, `${n + 1}.`, el("span", { class: "step-name", text: ` ${s.title}` })))));
  $("#stepper-title").textContent = `Step ${state.step + 1} of ${steps.length}: ${step.title}`;
  $("#stepper-formula").textContent = step.formula;
  $("#stepper-explain").textContent = step.explain;
  const parts = [el("div", { class: "inputs" }, step.inputs.map((name) => inputTable(step, name)))];
  if (step.result) parts.push(el("div", { class: "arrow", "aria-hidden": "true" }), el("div", { class: "result" }, resultTable(step)));
  $("#stepper-tables").replaceChildren(...parts);
  const work = $("#stepper-working");
  const rows = { weights: working, grad_scores: backWorking }[step.result];
  work.hidden = !rows;
  work.querySelector("h4").textContent = step.result === "grad_scores" ? "Back through the softmax, row by row" : "The softmax, worked row by row";
  work.querySelector("ol").replaceChildren(...(rows ? rows() : []));
  for (const [id, off] of [["#stepper-back", state.step === 0], ["#stepper-next", state.step === steps.length - 1]]) {
    $(id).setAttribute("aria-disabled", String(off)); // stays focusable: focus never drops to the page
  }
  const errors = fig.row_errors.map((e, i) => (e ? i : -1)).filter((i) => i >= 0);
  $("#stepper-rows").textContent = errors.length
    ? `⚠ ${errors.length === 1 ? `Query ${sub(errors[0])} has` : `Queries ${errors.map(sub).join(", ")} have`} no allowed key: shown as an error on that row, not as NaN.`
    : "";
  $("#stepper-causal").checked = state.causal;
  $("#stepper-scaled").checked = state.scaled;
  root.dataset.step = step.id;
  heatTables($("#stepper-tables"), isPresenting(root), cfg.heatmap_columns); // wide, presented: a heatmap
  highlight(state.sel.i, state.sel.j, true);
  if (focusGrid) $("#stepper-tables .step-result td[tabindex='0']")?.focus();
}

// Mark the entry (i, j) of the result and the entries that feed it, in place. pinned: it is also
// the keyboard's entry (tabindex 0) and the one announced.
function highlight(i, j, pinned) {
  const step = currentStep();
  const stage = $("#stepper-tables");
  stage.querySelectorAll(".feed, .selected, .previewed").forEach((td) => td.classList.remove("feed", "selected", "previewed"));
  $("#stepper-detail").textContent = detail(step, i, j);
  if (!step.result) {
    $("#stepper-live").textContent = `Step ${state.step + 1}: ${step.title}.`;
    return;
  }
  for (const name of step.inputs) {
    const isFeed = feeds(step, name, i, j);
    stage.querySelectorAll(`table[data-table="${name}"] td[data-col]`).forEach((td) => {
      if (isFeed({ i: +td.dataset.row, j: +td.dataset.col })) td.classList.add("feed");
    });
  }
  stage.querySelectorAll(".step-result td[data-row]").forEach((td) => {
    const on = +td.dataset.row === i && +(td.dataset.col ?? 0) === j;
    if (on) td.classList.add(pinned ? "selected" : "previewed");
    if (pinned) {
      td.tabIndex = on ? 0 : -1;
      td.setAttribute("aria-selected", String(on));
    } else if (+td.dataset.row === state.sel.i && +(td.dataset.col ?? 0) === state.sel.j) td.classList.add("selected");
  });
  if (pinned) {
    const t = state.fig.tables[step.result];
    const value = t.values[i]?.[j];
    $("#stepper-live").textContent = `Step ${state.step + 1}: ${step.title}. ${t.label}, row ${sub(i)}, column ${sub(j)}: ${rowError(i) && rowTable(step.result) ? "no weights" : fmt(value)}.`;
  }
}

function select(i, j, focus) {
  state.sel = { i, j };
  highlight(i, j, true);
  if (focus) $("#stepper-tables .step-result td[tabindex='0']")?.focus();
  writeUrl(urlEntries(), { push: false });
}

function onGridKey(event) {
  const moves = { ArrowUp: [-1, 0], ArrowDown: [1, 0], ArrowLeft: [0, -1], ArrowRight: [0, 1] };
  if (!(event.key in moves)) return;
  const table = event.currentTarget;
  const rows = table.tBodies[0].rows.length;
  const cols = table.tHead.rows[0].cells.length - 1;
  const [di, dj] = moves[event.key];
  event.preventDefault();
  event.stopPropagation();
  select(Math.max(0, Math.min(rows - 1, state.sel.i + di)), Math.max(0, Math.min(cols - 1, state.sel.j + dj)), true);
}

let play = null; // Play/Pause (js/play.js), made in init
function go(n, focusButton = false, byPlay = false) {
  if (!byPlay) play?.stop(); // a step taken by hand ends the play
  const next = Math.max(0, Math.min(state.fig.steps.length - 1, n));
  if (next === state.step) return;
  state.step = next;
  render();
  writeUrl(urlEntries());
  if (focusButton) $("#stepper-steps [aria-current='step']")?.focus();
}

export function goToStep(id) {
  const n = state.fig.steps.findIndex((s) => s.id === id);
  if (n >= 0) go(n);
}

// -- the URL: stepper.step, .cell (1-based "row,column"), .causal, .scaled, .q/.k/.v, .blocked --
const same = (a, b) => JSON.stringify(a) === JSON.stringify(b);
function urlEntries() {
  const ex = cfg.example;
  const ref = fromLearned();
  return {
    ...learnedUrl(ref),
    "stepper.step": state.step ? state.fig.steps[state.step].id : null,
    "stepper.cell": `${state.sel.i + 1},${state.sel.j + 1}`,
    "stepper.causal": state.causal ? null : 0,
    "stepper.scaled": state.scaled ? null : 0,
    "stepper.q": ref || same(state.q, ex.q) ? null : matrixToUrl(state.q),
    "stepper.k": ref || same(state.k, ex.k) ? null : matrixToUrl(state.k),
    "stepper.v": ref || same(state.v, ex.v) ? null : matrixToUrl(state.v),
    "stepper.blocked": state.blocked.map(([i, j]) => `${i + 1}-${j + 1}`).join(";") || null,
    "stepper.do": state.grad_output ? matrixToUrl(state.grad_output) : null,
  };
}

function fromUrl() {
  const ex = structuredClone(cfg.example);
  const blocked = (readUrl("stepper.blocked") || "").split(";").filter(Boolean)
    .map((pair) => pair.split("-").map((x) => Number(x) - 1)).filter((p) => p.length === 2 && p.every(Number.isInteger));
  const cell = (readUrl("stepper.cell") || "").split(",").map((x) => Number(x) - 1);
  return {
    request: {
      q: matrixFromUrl(readUrl("stepper.q")) ?? ex.q,
      k: matrixFromUrl(readUrl("stepper.k")) ?? ex.k,
      v: matrixFromUrl(readUrl("stepper.v")) ?? ex.v,
      causal: readUrl("stepper.causal") !== "0",
      scaled: readUrl("stepper.scaled") !== "0",
      blocked,
      grad_output: matrixFromUrl(readUrl("stepper.do")) ?? null,
      ...PLAIN,
    },
    step: readUrl("stepper.step"),
    sel: cell.length === 2 && cell.every((x) => Number.isInteger(x) && x >= 0) ? { i: cell[0], j: cell[1] } : { i: 1, j: 0 },
  };
}

// -- asking the server ------------------------------------------------------------------------
const inputs = () => ({ q: state.q, k: state.k, v: state.v, causal: state.causal, scaled: state.scaled, blocked: state.blocked, grad_output: state.grad_output, softcap: state.softcap, sink: state.sink, query_labels: state.query_labels, key_labels: state.key_labels });

// Only the latest request's answer is drawn: the worked example's comes at once, from the page
// itself, and may overtake an earlier one still with the server (Back twice, quickly).
let latest = 0;
async function submit(request, { push = true } = {}) {
  const ticket = ++latest;
  const error = $("#stepper-error");
  try {
    const fig = await api("/api/trace", { method: "POST", body: request });
    if (ticket !== latest) return false;
    Object.assign(state, request, { fig });
    clearError(error);
    root.classList.remove("stale");
    render();
    if (learned) learnedNote();
    if (push !== null) writeUrl(urlEntries(), { push });
    return true;
  } catch (err) {
    if (ticket !== latest) return false;
    refused(err);
    return false;
  }
}

// A refused input: say why, name the entry, and mark the figure as the last accepted one.
function refused(err) {
  showError($("#stepper-error"), err);
  if (!state.fig) return;
  root.classList.add("stale");
  $("#stepper-stale").textContent = "The tables below still show the last input the server accepted. Fix the entry named above, or press “Chapter example”.";
  $("#stepper-causal").checked = state.causal;
  $("#stepper-scaled").checked = state.scaled;
  const where = String(err.message).match(/^(?:[QKV]|dO) row \d+, column \d+/)?.[0];
  if (where) root.querySelector(`input[data-entry="${where}"]`)?.setAttribute("aria-invalid", "true");
}

async function editCell(name, i, j, text, input) {
  input.removeAttribute("aria-invalid");
  let x;
  try {
    x = checkEntry(NAMES[name], i, j, text, cfg.max_abs);
  } catch (err) {
    input.setAttribute("aria-invalid", "true");
    refused(err);
    return;
  }
  const matrix = (state[name] ?? ones()).map((row) => row.slice());
  matrix[i][j] = x;
  if (await submit({ ...inputs(), [name]: matrix })) {
    fillEditors();
    root.querySelector(`input[data-entry="${NAMES[name]} row ${i + 1}, column ${j + 1}"]`)?.focus();
  }
}

function fillEditors() {
  for (const name of ["q", "k", "v"]) $(`#stepper-edit-${name}`).value = toText(state[name]);
}

async function apply(event) {
  event.preventDefault();
  const next = {};
  try {
    for (const name of ["q", "k", "v"]) next[name] = parseMatrix(NAMES[name], $(`#stepper-edit-${name}`).value, cfg);
  } catch (err) {
    refused(err);
    return;
  }
  // A head's row names stay while its rows do; other shapes are plain rows again.
  const kept = next.q.length === state.q.length && next.k.length === state.k.length;
  await submit({ ...inputs(), ...next, blocked: [], grad_output: null, ...(kept ? {} : { query_labels: null, key_labels: null }) });
}

function randomExample() {
  const { random_tokens: n, random_width: d, random_range: r } = cfg;
  const entry = () => Math.floor(Math.random() * (2 * r + 1)) - r; // a whole number in -r..r
  const draw = () => Array.from({ length: n }, () => Array.from({ length: d }, entry));
  submit({ ...inputs(), q: draw(), k: draw(), v: draw(), blocked: [], grad_output: null, ...PLAIN }).then(fillEditors);
}

async function restore() {
  const { request, step, sel } = fromUrl();
  state.sel = sel;
  const ref = learnedFromUrl();
  if (ref && !same(ref, fromLearned())) await openLearned(ref, { push: null });
  else if (!ref && (!state.fig || !same(request, inputs()))) {
    await submit(request, { push: null });
    fillEditors();
  }
  if (!state.fig) return;
  const n = state.fig.steps.findIndex((s) => s.id === step);
  state.step = Math.max(0, n);
  render();
}

// -- a learned head's query, opened from the multi-head view's learned mode ----------------------
// Its q (one row), k and v (the keys the causal mask allows, so the stepper's own mask is off)
// come from GET /api/learned/head, for a model trained on this page (js/runs.js) from
// GET /api/runs/{id}/learned/head, for a real model (js/models.js) from GET /api/models/head.
// While Q, K and V are still that head's, the URL names the head (stepper.learned=layer,head,query,
// stepper.tokens, stepper.checkpoint, stepper.run or stepper.model), not its
// ~1,000 numbers. A run the server no longer keeps is refused by name, and the refusal stays shown.
let learned = null; // { ref, q, k, v } of the head last opened
let lost = null; // the refusal of the head the URL names, when it could not be opened

const fromLearned = () => (learned && same([state.q, state.k, state.v], [learned.q, learned.k, learned.v]) ? learned.ref : null);

function learnedUrl(ref) {
  return {
    "stepper.learned": ref ? [ref.layer, ref.head, ref.query].join(",") : null,
    "stepper.tokens": ref ? ref.tokens.join(",") : null,
    "stepper.checkpoint": ref?.checkpoint ?? null,
    "stepper.run": ref?.run ?? null,
    "stepper.model": ref?.model ?? null,
  };
}

function learnedFromUrl() {
  const at = listFromUrl(readUrl("stepper.learned"));
  const tokens = listFromUrl(readUrl("stepper.tokens"));
  if (!at || at.length !== 3 || !tokens) return null;
  const checkpoint = listFromUrl(readUrl("stepper.checkpoint"))?.[0] ?? null;
  const run = /^[0-9a-f]{1,32}$/.test(readUrl("stepper.run") ?? "") ? readUrl("stepper.run") : null;
  return { layer: at[0], head: at[1], query: at[2], tokens, checkpoint: run ? null : checkpoint, model: readUrl("stepper.model") ?? null, run };
}

function learnedNote() {
  let note = $("#stepper-learned");
  if (!note) {
    note = el("p", { id: "stepper-learned", class: "note", "aria-live": "polite" });
    $("#stepper-tables").before(note);
  }
  const ref = fromLearned();
  note.hidden = !ref;
  if (ref?.model) {
    const keys = learned.keys;
    const variants = [learned.softcap ? ` Its scores are capped at ±${fmt(learned.softcap)} (a step of its own, after scaling).` : "",
      learned.sink !== null && learned.sink !== undefined ? ` It has a sink of ${fmt(learned.sink)}: its share of each row's divisor is its own column at the softmax step.` : ""].join("");
    note.textContent = `Model head: layer ${ref.layer}, head ${ref.head} of ${ref.model}, query at position ${ref.query} (${state.query_labels?.[0] ?? ""}). Q is its one query row` +
      `${learned.scaled ? "" : ` times the model's scale ${fmt(learned.scale)} (so scaling here is off)`}; K and V are positions ${keys[0]} to ${keys[keys.length - 1]}, each row named by its 0-based position and token (␣ marks a leading space), ` +
      `the keys the model's mask allows, so the stepper's own mask is off. d_k = ${learned.q[0].length}.${variants}`;
  } else if (ref) {
    const model = ref.run ? `the induction model trained on this page (run ${ref.run})` : `the shipped induction model${ref.checkpoint === null ? "" : ` (checkpoint ${ref.checkpoint})`}`;
    note.textContent = `Learned head: layer ${ref.layer}, head ${ref.head} of ${model}, ` +
      `query at position ${ref.query} (token ${ref.tokens[ref.query]}). Q is its one query row; K and V are positions 0 to ${ref.query}, each row named by its 0-based position and token id, ` +
      "the keys the model's causal mask allows, so the stepper's own mask is off. d_k = " + `${learned.q[0].length}.`;
  }
}

// ref: { layer, head, query, tokens: [ids], checkpoint (null: the trained model), model (a real
// model's name from attnlab serve --model, js/models.js; null: the shipped induction model), run
// (null: the shipped model; else the id of a run trained on this page, whose checkpoint is its
// end) }.
export async function openLearned(ref, { push = true } = {}) {
  const params = new URLSearchParams({ layer: ref.layer, head: ref.head, query: ref.query });
  if (ref.model) params.set("model", ref.model);
  params.set(ref.model ? "ids" : "tokens", ref.tokens.join(" "));
  if (ref.checkpoint !== null && ref.checkpoint !== undefined && !ref.run) params.set("checkpoint", ref.checkpoint);
  const base = ref.model ? "/api/models/head" : ref.run ? `/api/runs/${encodeURIComponent(ref.run)}/learned/head` : "/api/learned/head";
  let head;
  try {
    head = await api(`${base}?${params}`);
  } catch (err) {
    lost = err;
    refused(err);
    return false;
  }
  lost = null;
  const opened = { q: head.q, k: head.k, v: head.v, causal: false, scaled: head.scaled, blocked: [], grad_output: null, softcap: head.softcap ?? null, sink: head.sink ?? null, query_labels: head.query_labels ?? null, key_labels: head.key_labels ?? null };
  // The keys in learnedFromUrl's order: restore compares the two as JSON.
  const kept = { layer: ref.layer, head: ref.head, query: ref.query, tokens: ref.tokens, checkpoint: ref.run ? null : ref.checkpoint ?? null, model: ref.model ?? null, run: ref.run ?? null };
  learned = { ref: kept, q: head.q, k: head.k, v: head.v, keys: head.keys, scaled: head.scaled, scale: head.scale, softcap: head.softcap ?? null, sink: head.sink ?? null };
  if (!(await submit(opened, { push }))) return false;
  fillEditors();
  learnedNote();
  return true;
}

function tableData() {
  const fig = state.fig;
  const step = currentStep();
  const names = step.result ? [...step.inputs, step.result] : step.inputs;
  return {
    caption: `Attention stepper, step ${state.step + 1} (${step.title}): d_k = ${fig.d_k}, causal mask ${fig.causal ? "on" : "off"}, scaling ${fig.scaled ? `by 1/√d_k = ${fmt(fig.scale)}` : "off"}${state.blocked.length ? `, ${state.blocked.length} pair(s) blocked by hand` : ""}${currentStep().phase === "backward" ? `, upstream gradient dO ${state.grad_output ? "as entered" : "all ones"}` : ""}.`,
    state: urlEntries(),
    tables: names.map((name) => ({ title: fig.tables[name].label, rows: fig.tables[name].rows, cols: fig.tables[name].cols, values: fig.tables[name].values })),
  };
}

export async function init() {
  const all = await config();
  cfg = all.stepper;
  stages = all.stages;
  saturated = all.histogram.threshold;
  $("#stepper-random").textContent = `Random ${cfg.random_tokens} tokens`;
  const stepBy = (d) => { go(state.step + d); };
  // Play: one step forward per tick; false at the last step, which ends the play.
  play = player({ button: $("#stepper-play"), pace: $("#stepper-pace"), step: () => {
    if (!state.fig || state.step >= state.fig.steps.length - 1) return false;
    go(state.step + 1, false, true);
    return true;
  } });
  $("#stepper-back").addEventListener("click", () => stepBy(-1));
  $("#stepper-next").addEventListener("click", () => stepBy(1));
  $("#stepper-causal").addEventListener("change", (e) => submit({ ...inputs(), causal: e.target.checked }));
  $("#stepper-scaled").addEventListener("change", (e) => submit({ ...inputs(), scaled: e.target.checked }));
  $("#stepper-form").addEventListener("submit", apply);
  $("#stepper-reset").addEventListener("click", () => submit({ ...inputs(), ...structuredClone(cfg.example), blocked: [], grad_output: null, ...PLAIN }).then(fillEditors));
  $("#stepper-random").addEventListener("click", randomExample);
  // Presenting: the arrow keys step (unless a grid or a text box has them).
  document.addEventListener("keydown", (event) => {
    if (!isPresenting(root) || event.target.closest("input, textarea, [role='grid']")) return;
    if (event.key === "p" || event.key === "P") { event.preventDefault(); $("#stepper-play").click(); return; }
    const d = { ArrowRight: 1, ArrowLeft: -1, PageDown: 1, PageUp: -1 }[event.key];
    if (d) { event.preventDefault(); stepBy(d); }
  });
  figureTools(root, { name: "attention-stepper", data: tableData });
  root.addEventListener("presentchange", () => state.fig && render());
  onUrlChange(restore);
  await restore();
  if (!state.fig) {
    await submit({ ...structuredClone(cfg.example), causal: true, scaled: true, blocked: [], grad_output: null, ...PLAIN }, { push: null });
    if (lost) showError($("#stepper-error"), lost); // the head the URL names could not be opened: say so
  }
}
