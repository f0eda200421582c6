// Figure attention-stepper: walk one attention call table by table (numbers from POST /api/trace).
import { api, clearError, config, el, fmt, matrixTable, showError } from "./common.js";

// The worked example and the limits come from GET /api/config (set in init).
let cfg = null;

const root = document.getElementById("figure-attention-stepper");
const $ = (sel) => root.querySelector(sel);
const state = {
  q: [],
  k: [],
  v: [],
  causal: true,
  scaled: true,
  blocked: [],
  step: 0,
  sel: { i: 1, j: 0 },
  fig: null,
};

const DIGITS = { weights: 6 };
const sub = (n) => String(n + 1);

// -- which entries feed entry (i, j) of the current step's result ---------------------------
function feeds(step, tableName, i, j) {
  switch (step.feeds) {
    case "qk":
      return (r) => (tableName === "q" ? r.i === i : r.i === j);
    case "cell":
      return (r) => r.i === i && r.j === j;
    case "row":
      return (r) => r.i === i;
    case "av":
      return (r) => (tableName === "weights" ? r.i === i : r.j === j);
    default:
      return () => false;
  }
}

function rowError(i) {
  return state.fig.row_errors[i];
}

function stepTables(step) {
  const fig = state.fig;
  const { i, j } = state.sel;
  const inputs = step.inputs.map((name) => {
    const t = fig.tables[name];
    const isFeed = feeds(step, name, i, j);
    const editableMask = name === "mask";
    const table = matrixTable({
      caption: t.label,
      rows: t.rows,
      cols: t.cols,
      values: t.values,
      digits: DIGITS[name] ?? 3,
      rowError: name === "weights" ? rowError : null,
      cell: (r, c, value) => {
        const attrs = {};
        if (step.result && isFeed({ i: r, j: c })) attrs.class = "feed";
        if (editableMask) attrs.text = value === null ? "−∞" : "0";
        return attrs;
      },
    });
    table.dataset.table = name;
    table.classList.add("step-input");
    if (editableMask) makeMaskButtons(table);
    return table;
  });
  if (!step.result) return { inputs, result: null };
  const t = fig.tables[step.result];
  const result = matrixTable({
    caption: t.label,
    rows: t.rows,
    cols: t.cols,
    values: t.values,
    digits: DIGITS[step.result] ?? 3,
    rowError: ["weights", "output"].includes(step.result) ? rowError : null,
    cell: (r, c) => ({
      tabindex: r === i && c === j ? "0" : "-1",
      class: r === i && c === j ? "selected" : null,
      "aria-selected": r === i && c === j ? "true" : "false",
    }),
  });
  result.dataset.table = step.result;
  result.classList.add("step-result");
  result.setAttribute("role", "grid");
  result.setAttribute("aria-label", `${t.label}: use the arrow keys to pick an entry`);
  result.addEventListener("keydown", onGridKey);
  result.addEventListener("click", (event) => {
    const td = event.target.closest("td[data-row]");
    if (td) select(+td.dataset.row, +(td.dataset.col ?? 0), true);
  });
  result.addEventListener("mouseover", (event) => {
    const td = event.target.closest("td[data-col]");
    if (td && (+td.dataset.row !== state.sel.i || +td.dataset.col !== state.sel.j)) {
      select(+td.dataset.row, +td.dataset.col, false);
    }
  });
  return { inputs, result };
}

function makeMaskButtons(table) {
  table.querySelectorAll("td[data-col]").forEach((td) => {
    const i = +td.dataset.row;
    const j = +td.dataset.col;
    const byHand = state.blocked.some(([a, b]) => a === i && b === j);
    const byCausal = state.causal && j > i;
    const what = byCausal ? "blocked by the causal mask" : byHand ? "blocked by hand" : "allowed";
    const button = el("button", {
      type: "button",
      class: "mask-cell",
      "aria-pressed": byHand ? "true" : "false",
      "aria-label": `query ${i + 1}, key ${j + 1}: ${what}. Press to ${byHand ? "unblock" : "block"} by hand`,
      onclick: () => toggleBlocked(i, j),
    }, td.textContent, byHand ? el("span", { class: "mark", "aria-hidden": "true", text: " ✎" }) : null);
    td.textContent = "";
    td.append(button);
  });
}

function toggleBlocked(i, j) {
  const at = state.blocked.findIndex(([a, b]) => a === i && b === j);
  if (at >= 0) state.blocked.splice(at, 1);
  else state.blocked.push([i, j]);
  refresh().then(() => {
    const button = root.querySelector(`table[data-table="mask"] td[data-row="${i}"][data-col="${j}"] button`);
    if (button) button.focus();
  });
}

// -- the explanation of the selected entry, written out ----------------------------------------
function detail(step) {
  const fig = state.fig;
  const { i, j } = state.sel;
  const T = fig.tables;
  const error = fig.row_errors[i];
  if (!step.result) {
    return `${fig.tables.q.rows.length} queries and ${fig.tables.k.rows.length} keys, d_k = ${fig.d_k}, d_v = ${T.v.cols.length}.`;
  }
  if (error && ["weights", "output"].includes(step.result)) return `⚠ ${error}.`;
  const q = T.q.values[i];
  const k = T.k.values[j];
  switch (step.result) {
    case "scores": {
      const terms = q.map((x, d) => `(${fmt(x)})(${fmt(k[d])})`).join(" + ");
      return `score of query ${sub(i)} and key ${sub(j)}: q${sub(i)} · k${sub(j)} = ${terms} = ${fmt(T.scores.values[i][j])}`;
    }
    case "scaled":
      return `${fmt(T.scores.values[i][j])} × ${fmt(fig.scale, 4)} = ${fmt(T.scaled.values[i][j])}`;
    case "masked": {
      const m = T.mask.values[i][j];
      const why = m === null ? (fig.causal && j > i ? ": key " + sub(j) + " comes after query " + sub(i) : ": blocked by hand") : "";
      return `${fmt(T.scaled.values[i][j])} + ${m === null ? "(−∞)" : "0"} = ${fmt(T.masked.values[i][j])}${why}`;
    }
    case "weights": {
      const row = T.masked.values[i].map((x) => fmt(x)).join(", ");
      const w = T.weights.values[i].map((x) => fmt(x, 6)).join(", ");
      return `softmax of row ${sub(i)}, [${row}], gives [${w}]: the weights add up to 1.`;
    }
    case "output": {
      const terms = T.weights.values[i].map((a, m) => `(${fmt(a)})(${fmt(T.v.values[m][j])})`).join(" + ");
      return `output ${sub(i)}, feature ${sub(j)}: weights of query ${sub(i)} times column ${sub(j)} of V = ${terms} = ${fmt(T.output.values[i][j])}`;
    }
    default:
      return "";
  }
}

// -- drawing ----------------------------------------------------------------------------------
function render(focusGrid = false) {
  const fig = state.fig;
  const steps = fig.steps;
  const step = steps[state.step];
  const result = step.result ? fig.tables[step.result] : null;
  if (result) {
    state.sel.i = Math.min(state.sel.i, result.rows.length - 1);
    state.sel.j = Math.min(state.sel.j, result.cols.length - 1);
  }
  $("#stepper-steps").replaceChildren(
    ...steps.map((s, n) =>
      el("li", {},
        el("button", {
          type: "button",
          "aria-current": n === state.step ? "step" : false,
          onclick: () => go(n, true),
        }, `${n + 1}. ${s.title}`)),
    ),
  );
  $("#stepper-title").textContent = `Step ${state.step + 1} of ${steps.length}: ${step.title}`;
  $("#stepper-formula").textContent = step.formula;
  $("#stepper-explain").textContent = step.explain;
  const { inputs, result: resultTable } = stepTables(step);
  const stage = $("#stepper-tables");
  const parts = [el("div", { class: "inputs" }, inputs)];
  if (resultTable) parts.push(el("div", { class: "arrow", "aria-hidden": "true", text: "→" }), el("div", { class: "result" }, resultTable));
  stage.replaceChildren(...parts);
  $("#stepper-detail").textContent = detail(step);
  $("#stepper-back").disabled = state.step === 0;
  $("#stepper-next").disabled = state.step === steps.length - 1;
  const errors = fig.row_errors.map((e, i) => (e ? i : -1)).filter((i) => i >= 0);
  $("#stepper-rows").textContent = errors.length
    ? `⚠ ${errors.length === 1 ? "Query " + sub(errors[0]) + " has" : "Queries " + errors.map(sub).join(", ") + " have"} no allowed key: shown as an error on that row, not as NaN.`
    : "";
  if (focusGrid) {
    const cell = stage.querySelector(".step-result td[tabindex='0']");
    if (cell) cell.focus();
  }
}

function select(i, j, focus) {
  state.sel = { i, j };
  render(focus);
}

function onGridKey(event) {
  const table = event.currentTarget;
  const rows = table.tBodies[0].rows.length;
  const cols = table.tHead.rows[0].cells.length - 1;
  let { i, j } = state.sel;
  const moves = { ArrowUp: [-1, 0], ArrowDown: [1, 0], ArrowLeft: [0, -1], ArrowRight: [0, 1] };
  if (event.key in moves) {
    const [di, dj] = moves[event.key];
    i = Math.max(0, Math.min(rows - 1, i + di));
    j = Math.max(0, Math.min(cols - 1, j + dj));
    event.preventDefault();
    select(i, j, true);
  }
}

function go(n, focusButton = false) {
  const steps = state.fig.steps;
  state.step = Math.max(0, Math.min(steps.length - 1, n));
  render();
  if (focusButton) $("#stepper-steps [aria-current='step']")?.focus();
}

export function goToStep(id) {
  const n = state.fig.steps.findIndex((s) => s.id === id);
  if (n >= 0) go(n);
}

async function refresh() {
  const error = $("#stepper-error");
  try {
    state.fig = await api("/api/trace", {
      method: "POST",
      body: { q: state.q, k: state.k, v: state.v, causal: state.causal, scaled: state.scaled, blocked: state.blocked },
    });
    clearError(error);
    render();
  } catch (err) {
    showError(error, err);
  }
}

// -- editing Q, K and V -----------------------------------------------------------------------
const toText = (m) => m.map((row) => row.join(" ")).join("\n");

function parse(name, text) {
  const rows = text.trim().split(/\n+/).map((line) => line.trim().split(/[\s,;]+/).filter(Boolean));
  if (!rows.length || !rows[0].length) throw new Error(`${name}: expected at least one row of numbers`);
  const { max_tokens: tokens, max_width: width } = cfg;
  if (rows.length > tokens) throw new Error(`${name}: expected at most ${tokens} rows (tokens), but got ${rows.length}`);
  return rows.map((row, i) => {
    if (row.length > width) throw new Error(`${name}: expected at most ${width} numbers a row, but row ${i + 1} has ${row.length}`);
    return row.map((cell, j) => {
      const x = Number(cell.replace("−", "-"));
      if (!Number.isFinite(x)) throw new Error(`${name}: expected a number at row ${i + 1}, column ${j + 1}, but got “${cell}”`);
      return x;
    });
  });
}

function fillEditors() {
  for (const name of ["q", "k", "v"]) $(`#stepper-edit-${name}`).value = toText(state[name]);
}

async function apply(event) {
  event.preventDefault();
  const error = $("#stepper-error");
  try {
    const next = {};
    for (const name of ["q", "k", "v"]) next[name] = parse(name.toUpperCase(), $(`#stepper-edit-${name}`).value);
    Object.assign(state, next, { blocked: [] });
  } catch (err) {
    showError(error, err);
    return;
  }
  await refresh();
}

function randomExample() {
  const { random_tokens: n, random_width: d, random_range: r } = cfg;
  const entry = () => Math.floor(Math.random() * (2 * r + 1)) - r; // a whole number in -r..r
  const draw = () => Array.from({ length: n }, () => Array.from({ length: d }, entry));
  Object.assign(state, { q: draw(), k: draw(), v: draw(), blocked: [] });
  fillEditors();
  refresh();
}

const example = () => structuredClone(cfg.example);

export async function init() {
  cfg = (await config()).stepper;
  Object.assign(state, example());
  $("#stepper-random").textContent = `Random ${cfg.random_tokens} tokens`;
  $("#stepper-back").addEventListener("click", () => go(state.step - 1));
  $("#stepper-next").addEventListener("click", () => go(state.step + 1));
  $("#stepper-causal").addEventListener("change", (e) => { state.causal = e.target.checked; refresh(); });
  $("#stepper-scaled").addEventListener("change", (e) => { state.scaled = e.target.checked; refresh(); });
  $("#stepper-form").addEventListener("submit", apply);
  $("#stepper-reset").addEventListener("click", () => {
    Object.assign(state, example(), { blocked: [] });
    fillEditors();
    refresh();
  });
  $("#stepper-random").addEventListener("click", randomExample);
  fillEditors();
  await refresh();
}
