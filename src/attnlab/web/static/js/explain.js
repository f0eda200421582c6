// Every equation of the chapter, symbol by symbol (GET /api/equations): each symbol is a button
// that opens its shape, its meaning and a link to the figure or lab that shows it live.
import { api, el } from "./common.js";
import * as stepper from "./stepper.js";

// "W_{i}^{Q}" -> W<sub>i</sub><sup>Q</sup>, built as nodes (never innerHTML); braces nest, so
// "Σ_{i=1}^{d_{k}}" puts d_k, itself subscripted, in the superscript.
export function markup(text) {
  const nodes = [];
  let plainText = "";
  const flush = () => { if (plainText) nodes.push(document.createTextNode(plainText)); plainText = ""; };
  for (let i = 0; i < text.length; i++) {
    const c = text[i];
    if ((c === "_" || c === "^") && text[i + 1] === "{") {
      let depth = 0;
      let j = i + 1;
      for (; j < text.length; j++) {
        if (text[j] === "{") depth++;
        else if (text[j] === "}" && --depth === 0) break;
      }
      flush();
      nodes.push(el(c === "_" ? "sub" : "sup", {}, markup(text.slice(i + 2, j))));
      i = j;
    } else plainText += c;
  }
  flush();
  return nodes;
}

export function plain(text) {
  return text.replaceAll("{", "").replaceAll("}", "");
}

// Follow a symbol's link: open the stepper at its step, or pick its lab on the labs' tabs.
export function follow(link) {
  if (link.step && link.href === "#figure-attention-stepper") stepper.goToStep?.(link.step);
  if (link.lab) document.querySelector(`#lab-tabs [data-lab="${link.lab}"]`)?.click();
}

function linkTo(link) {
  return el("a", { href: link.href, class: "why-link", onclick: () => follow(link) }, `${link.label} →`);
}

function show(card, eq, id) {
  const s = eq.symbols.find((x) => x.id === id);
  card.querySelectorAll(".why-sym").forEach((b) => b.setAttribute("aria-pressed", String(b.dataset.symbol === id)));
  rove(card, card.querySelector(`.why-sym[data-symbol="${id}"]`));
  card.querySelector(".why-panel").replaceChildren(
    el("h4", {}, el("span", { class: "why-sym-text" }, markup(s.text))),
    el("p", { class: "why-meaning", text: s.meaning }),
    el("p", { class: "why-shape" }, el("strong", { text: "Shape: " }), s.shape),
    el("p", {}, linkTo(s.link)),
  );
  card.dataset.shown = id;
}

// The accessible name starts with the text the button shows (as rendered, subscripts and all),
// so a voice-control user can say what they see.
function symbolButton(eq, s) {
  const button = el("button", { type: "button", class: "why-sym", "data-symbol": s.id, "aria-pressed": "false" }, markup(s.text));
  button.setAttribute("aria-label", `${button.textContent.trim()}: show what it means`);
  return button;
}

// One Tab stop per equation (a roving tabindex): the shown symbol is the card's one stop, and
// the arrow keys, Home and End move between its symbols, showing each, in reading order.
function rove(card, to) {
  card.querySelectorAll(".why-sym").forEach((b) => { b.tabIndex = b === to ? 0 : -1; });
}

const MOVES = { ArrowRight: 1, ArrowDown: 1, ArrowLeft: -1, ArrowUp: -1 };

function onKey(card, eq, event) {
  const from = event.target.closest(".why-sym");
  if (!from) return;
  const all = [...card.querySelectorAll(".why-sym")];
  const at = all.indexOf(from);
  const to = event.key === "Home" ? 0 : event.key === "End" ? all.length - 1
    : event.key in MOVES ? (at + MOVES[event.key] + all.length) % all.length : null;
  if (to === null) return;
  event.preventDefault();
  show(card, eq, all[to].dataset.symbol);
  all[to].focus();
}

// A card shown beside its figure repeats one in "The why": its ids carry a prefix and it is
// marked data-beside, so each equation keeps one data-equation card on the page.
function explainer(eq, prefix = "") {
  const byId = Object.fromEntries(eq.symbols.map((s) => [s.id, s]));
  const used = new Set(eq.parts.filter((p) => p.sym).map((p) => p.sym));
  const line = el("p", { class: "why-eq", role: "group", "aria-label": `${eq.title}: the arrow keys move between its symbols` }, eq.parts.map((p) =>
    p.sym ? symbolButton(eq, byId[p.sym]) : el("span", { class: "why-op", text: ` ${p.op} ` })));
  const rest = eq.symbols.filter((s) => !used.has(s.id));
  const head = `${prefix}why-eq-${eq.id}`;
  const card = el("article", { class: "why-card explainer", [prefix ? "data-beside" : "data-equation"]: eq.id, "aria-labelledby": head },
    el("h3", { id: head }, eq.title, el("span", { class: "why-section-ref", text: ` ${eq.section}` })),
    line,
    rest.length ? el("p", { class: "why-where" }, "where ", rest.map((s) => symbolButton(eq, s))) : null,
    el("p", { class: "why-words", text: eq.words }),
    eq.notes.length ? el("ul", { class: "why-notes" }, eq.notes.map((n) => el("li", { text: n }))) : null,
    el("div", { class: "why-panel panel", role: "status", "aria-live": "polite" }),
  );
  card.addEventListener("click", (event) => {
    const button = event.target.closest(".why-sym");
    if (button) show(card, eq, button.dataset.symbol);
  });
  card.addEventListener("keydown", (event) => onKey(card, eq, event));
  show(card, eq, eq.symbols[0].id);
  return card;
}

let loaded = null;
const equations = () => { loaded ??= api("/api/equations").then((r) => r.equations); return loaded; };

export async function render(root) {
  root.replaceChildren(...(await equations()).map((eq) => explainer(eq)));
}

// Beside each figure, after its own words: a folded "why" holding that figure's equations
// (each explainer names its figure), filled the first time a reader opens it.
const FIGURES = ["figure-attention-stepper", "figure-sqrt-dk-histogram", "figure-permutation-demo", "figure-multi-head"];

export function besides(report) {
  for (const id of FIGURES) {
    const section = document.getElementById(id);
    if (!section) continue;
    const grid = el("div", { class: "why-grid" });
    const fold = el("details", { class: "why-beside", "data-figure": id },
      el("summary", {}, "The why behind this figure"), grid);
    section.append(fold);
    fold.addEventListener("toggle", async () => {
      if (!fold.open || grid.childElementCount) return;
      try {
        const mine = (await equations()).filter((eq) => eq.figure === `#${id}`);
        grid.replaceChildren(...mine.map((eq) => explainer(eq, `${id}-`)));
      } catch (err) {
        report(err);
      }
    });
  }
}
