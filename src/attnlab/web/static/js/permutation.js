// Figure permutation-demo: shuffle the tokens, watch the outputs (POST /api/permutation).
import { api, clearError, config, el, fmt, showError } from "./common.js";

const root = document.getElementById("figure-permutation-demo");
const $ = (sel) => root.querySelector(sel);
const state = { order: null, positions: false, fig: null };
const reduceMotion = window.matchMedia("(prefers-reduced-motion: reduce)").matches;

function shuffled(order) {
  // Fisher-Yates until the order differs, so every press visibly moves something.
  let next = order.slice();
  do {
    for (let i = next.length - 1; i > 0; i--) {
      const j = Math.floor(Math.random() * (i + 1));
      [next[i], next[j]] = [next[j], next[i]];
    }
  } while (next.every((x, i) => x === order[i]));
  return next;
}

// "Unchanged" means unchanged to the last digit shown: every printed value prints the same.
const shownSame = (t) => t.output.every((x, f) => fmt(x) === fmt(t.original_output[f]));

function positionsBefore() {
  const tops = {};
  root.querySelectorAll("#perm-table tbody tr").forEach((tr) => { tops[tr.dataset.token] = tr.getBoundingClientRect().top; });
  return tops;
}

function render(before) {
  const fig = state.fig;
  const d = fig.d_model;
  const head = el("tr", {},
    el("th", { scope: "col", text: "slot" }),
    el("th", { scope: "col", text: "token" }),
    el("th", { scope: "col", colspan: d, text: `output vector (${d} features)` }),
    el("th", { scope: "col", text: "vs. the sentence as written" }));
  const rows = fig.tokens.map((t) => {
    const same = shownSame(t);
    return el("tr", { "data-token": t.id, "data-text": t.text },
      el("td", { text: t.slot + 1 }),
      el("th", { scope: "row", class: "token" }, t.text, el("span", { class: "token-id", text: ` #${t.id + 1}` })),
      t.output.map((x, f) => el("td", { class: "num", "data-value": String(x), "data-feature": f, title: String(x), text: fmt(x) })),
      el("td", { class: same ? "same" : "changed", "data-change": String(t.max_change) },
        same ? "✓ same values" : `✗ changed by up to ${fmt(t.max_change)}`));
  });
  $("#perm-table").replaceChildren(
    el("caption", {}, `Self-attention outputs, ${fig.positions ? "with" : "without"} position vectors`),
    el("thead", {}, head),
    el("tbody", {}, rows));
  $("#perm-sentence").textContent = `Now reading: “${fig.tokens.map((t) => t.text).join(" ")}”.`;
  const changed = fig.tokens.filter((t) => !shownSame(t)).length;
  $("#perm-summary").textContent = changed
    ? `${changed} of ${fig.tokens.length} tokens have different output values from the sentence as written: with position vectors, where a token sits matters.`
    : `Every token's output has the same values as in the sentence as written; only the rows moved.`;
  if (before && !reduceMotion) {
    root.querySelectorAll("#perm-table tbody tr").forEach((tr) => {
      const from = before[tr.dataset.token];
      if (from === undefined) return;
      const dy = from - tr.getBoundingClientRect().top;
      if (dy) tr.animate([{ transform: `translateY(${dy}px)` }, { transform: "none" }], { duration: 350, easing: "ease-out" });
    });
  }
}

async function refresh() {
  const before = state.fig ? positionsBefore() : null;
  try {
    state.fig = await api("/api/permutation", { method: "POST", body: { order: state.order, positions: state.positions } });
    state.order = state.fig.order;
    clearError($("#perm-error"));
    render(before);
  } catch (err) {
    showError($("#perm-error"), err);
  }
}

export async function init() {
  const { permutation: p } = await config();
  const swap = $("#perm-swap");
  swap.textContent = `“${p.swap.map((token) => p.sentence[token]).join(" ")}”`;
  $("#perm-shuffle").addEventListener("click", () => { state.order = shuffled(state.order); refresh(); });
  swap.addEventListener("click", () => { state.order = p.swap.slice(); refresh(); });
  $("#perm-reset").addEventListener("click", () => { state.order = null; refresh(); });
  $("#perm-positions").addEventListener("change", (e) => { state.positions = e.target.checked; refresh(); });
  await refresh();
}
