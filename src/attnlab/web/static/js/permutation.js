// Figure permutation-demo: reorder the tokens (or type your own), watch the outputs
// (POST /api/permutation).
import { api, clearError, config, el, fmt, showError } from "./common.js";
import { figureTools } from "./export.js";
import { listFromUrl, onUrlChange, readUrl, writeUrl } from "./state.js";

const root = document.getElementById("figure-permutation-demo");
const $ = (sel) => root.querySelector(sel);
const state = { order: null, positions: false, words: null, fig: null };
const reduceMotion = window.matchMedia("(prefers-reduced-motion: reduce)").matches;
let cfg = null;

function shuffled(order) {
  // Fisher-Yates until the order differs, so every press visibly moves something.
  let next = order.slice();
  do {
    for (let i = next.length - 1; i > 0; i--) {
      const j = Math.floor(Math.random() * (i + 1));
      [next[i], next[j]] = [next[j], next[i]];
    }
  } while (next.length > 1 && next.every((x, i) => x === order[i]));
  return next;
}

// "Unchanged" means unchanged to the last digit shown: every printed value prints the same.
const shownSame = (t) => t.output.every((x, f) => fmt(x) === fmt(t.original_output[f]));

function positionsBefore() {
  const tops = {};
  root.querySelectorAll("#perm-table tbody tr").forEach((tr) => { tops[tr.dataset.token] = tr.getBoundingClientRect().top; });
  return tops;
}

// Move the token in `slot` by `delta` places (the ▲/▼ buttons, or a drag and drop).
function move(slot, to) {
  const order = state.order.slice();
  const [token] = order.splice(slot, 1);
  order.splice(to, 0, token);
  refresh({ order }).then(() => root.querySelector(`#perm-table tr[data-token="${token}"] button[data-move="${to < slot ? "up" : "down"}"]`)?.focus());
}

function moveButtons(t, n) {
  const word = `“${t.text}”`;
  return el("td", { class: "move" },
    el("button", { type: "button", "data-move": "up", "aria-label": `Move ${word} earlier`, disabled: t.slot === 0, onclick: () => move(t.slot, t.slot - 1) }, "▲"),
    el("button", { type: "button", "data-move": "down", "aria-label": `Move ${word} later`, disabled: t.slot === n - 1, onclick: () => move(t.slot, t.slot + 1) }, "▼"));
}

function render(before) {
  const fig = state.fig;
  const d = fig.d_model;
  const n = fig.tokens.length;
  const head = el("tr", {},
    el("th", { scope: "col", text: "slot" }),
    el("th", { scope: "col", text: "token" }),
    el("th", { scope: "col", text: "move" }),
    el("th", { scope: "col", colspan: d, text: `output vector (${d} features)` }),
    el("th", { scope: "col", text: "vs. the sentence as written" }));
  const rows = fig.tokens.map((t) => {
    const same = shownSame(t);
    const tr = el("tr", { "data-token": t.id, "data-text": t.text, draggable: "true" },
      el("td", { text: t.slot + 1 }),
      el("th", { scope: "row", class: "token" }, t.text, el("span", { class: "token-id", text: ` #${t.id + 1}` })),
      moveButtons(t, n),
      t.output.map((x, f) => el("td", { class: "num", "data-value": String(x), "data-feature": f, title: String(x), text: fmt(x) })),
      el("td", { class: same ? "same" : "changed", "data-change": String(t.max_change) },
        same ? "✓ same values" : `✗ changed by up to ${fmt(t.max_change)}`));
    tr.addEventListener("dragstart", (e) => e.dataTransfer.setData("text/plain", String(t.slot)));
    tr.addEventListener("dragover", (e) => e.preventDefault());
    tr.addEventListener("drop", (e) => { e.preventDefault(); move(+e.dataTransfer.getData("text/plain"), t.slot); });
    return tr;
  });
  $("#perm-table").replaceChildren(
    el("caption", {}, `Self-attention outputs, ${fig.positions ? "with" : "without"} position vectors`),
    el("thead", {}, head),
    el("tbody", {}, rows));
  const invented = madeUp(fig);
  $("#perm-sentence").textContent = `Now reading: “${fig.tokens.map((t) => t.text).join(" ")}”.${invented.length
    ? ` Made-up vectors: ${invented.map((w) => `“${w}”`).join(", ")} ${invented.length === 1 ? "is not one of the chapter's words, so its vector is" : "are not the chapter's words, so their vectors are"} made up from the spelling (the same every time), not learned.`
    : ""}`;
  root.dataset.madeUp = invented.join(" ");
  const changed = fig.tokens.filter((t) => !shownSame(t)).length;
  $("#perm-summary").textContent = changed
    ? `${changed} of ${n} tokens have different output values from the sentence as written: with position vectors, where a token sits matters.`
    : "Every token's output has the same values as in the sentence as written; only the rows moved.";
  $("#perm-positions").checked = fig.positions;
  if (before && !reduceMotion) {
    root.querySelectorAll("#perm-table tbody tr").forEach((tr) => {
      const from = before[tr.dataset.token];
      if (from === undefined) return;
      const dy = from - tr.getBoundingClientRect().top;
      if (dy) tr.animate([{ transform: `translateY(${dy}px)` }, { transform: "none" }], { duration: 350, easing: "ease-out" });
    });
  }
}

// change: the controls that differ from the current state. push: null leaves the URL alone.
// Only the latest request's answer is drawn: Back twice in a row may ask for a state the page
// already holds (answered at once) while the one before it is still with the server.
let latest = 0;
async function refresh(change = {}, { push = true } = {}) {
  const ticket = ++latest;
  const next = { order: state.order, positions: state.positions, words: state.words, ...change };
  const before = state.fig ? positionsBefore() : null;
  try {
    const fig = await api("/api/permutation", { method: "POST", body: { order: next.order, positions: next.positions, words: next.words } });
    if (ticket !== latest) return; // a later change is on its way, or drawn already
    Object.assign(state, next, { fig, order: fig.order });
    clearError($("#perm-error"));
    render(before);
    const identity = fig.order.every((x, i) => x === i);
    if (push !== null) {
      writeUrl({
        "perm.order": identity ? null : fig.order.map((x) => x + 1).join(","),
        "perm.pos": fig.positions ? 1 : null,
        "perm.words": state.words ? state.words.join(" ") : null,
      }, { push });
    }
  } catch (err) {
    if (ticket !== latest) return;
    showError($("#perm-error"), err);
    $("#perm-positions").checked = state.positions;
  }
}

// The server checks the words too (and names a bad one); checked here first, the refusal says
// in the reader's terms what to change, with nothing sent.
const WORD = /^\p{L}+(?:['’-]\p{L}+)*$/u;
export function wordsProblem(text, { min_words: min, max_words: max, max_word_length: longest }) {
  const words = text.trim().split(/\s+/).filter(Boolean);
  if (!words.length) return `Type ${min} to ${max} words first, separated by spaces (for example: the cat saw a bird).`;
  if (words.length < min || words.length > max) return `Use ${min} to ${max} words: “${text.trim().slice(0, 60)}” has ${words.length}.`;
  for (const [n, word] of words.entries()) {
    if (!WORD.test(word)) {
      const odd = [...word].find((c) => !/[\p{L}'’-]/u.test(c)) ?? word[0];
      return `Letters only, please: word ${n + 1}, “${word.slice(0, 30)}”, has “${odd}”, which is not a letter (an apostrophe or hyphen inside a word is fine; words are separated by spaces).`;
    }
    if ([...word].length > longest) return `Too long: word ${n + 1}, “${word.slice(0, 30)}…”, has ${[...word].length} letters; the most is ${longest}.`;
  }
  return null;
}

function ownWords(event) {
  event.preventDefault();
  const text = $("#perm-words").value;
  const problem = wordsProblem(text, cfg);
  if (problem) {
    showError($("#perm-error"), problem);
    $("#perm-words").setAttribute("aria-invalid", "true");
    return;
  }
  $("#perm-words").removeAttribute("aria-invalid");
  refresh({ words: text.trim().split(/\s+/), order: null });
}

// Only the chapter's words have vectors set by hand; any other word's is made up from its
// spelling (the same every time), and the page says so.
function madeUp(fig) {
  const known = new Set(cfg.sentence.map((w) => w.toLowerCase()));
  return [...new Set(fig.tokens.map((t) => t.text).filter((w) => !known.has(w.toLowerCase())))];
}

function restore() {
  const words = readUrl("perm.words");
  const order = listFromUrl(readUrl("perm.order"));
  $("#perm-words").value = words || "";
  return refresh({
    words: words ? words.split(/\s+/) : null,
    order: order ? order.map((x) => x - 1) : null,
    positions: readUrl("perm.pos") === "1",
  }, { push: null });
}

function tableData() {
  const fig = state.fig;
  return {
    caption: `Permutation demo: “${fig.tokens.map((t) => t.text).join(" ")}”, position vectors ${fig.positions ? "added" : "off"}, no mask, d_model = ${fig.d_model}.`,
    state: { order: fig.order, positions: fig.positions, words: state.words },
    tables: [{ title: "Self-attention outputs", rows: fig.tokens.map((t) => `${t.slot + 1}. ${t.text}`), cols: [...Array(fig.d_model).keys()].map((f) => `feature ${f + 1}`), values: fig.tokens.map((t) => t.output) }],
  };
}

export async function init() {
  cfg = (await config()).permutation;
  const swap = $("#perm-swap");
  swap.textContent = `“${cfg.swap.map((token) => cfg.sentence[token]).join(" ")}”`;
  $("#perm-shuffle").addEventListener("click", () => refresh({ order: shuffled(state.order) }));
  swap.addEventListener("click", () => refresh({ order: cfg.swap.slice(), words: null }).then(() => { $("#perm-words").value = ""; }));
  $("#perm-reset").addEventListener("click", () => refresh({ order: null }));
  $("#perm-positions").addEventListener("change", (e) => refresh({ positions: e.target.checked }));
  $("#perm-words-form").addEventListener("submit", ownWords);
  $("#perm-words").setAttribute("placeholder", cfg.sentence.join(" "));
  figureTools(root, { name: "permutation-demo", data: tableData });
  onUrlChange(restore);
  await restore();
}
