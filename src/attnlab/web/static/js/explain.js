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

function explainer(eq) {
  const byId = Object.fromEntries(eq.symbols.map((s) => [s.id, s]));
  const used = new Set(eq.parts.filter((p) => p.sym).map((p) => p.sym));
  const line = el("p", { class: "why-eq" }, eq.parts.map((p) =>
    p.sym ? symbolButton(eq, byId[p.sym]) : el("span", { class: "why-op", text: ` ${p.op} ` })));
  const rest = eq.symbols.filter((s) => !used.has(s.id));
  const card = el("article", { class: "why-card explainer", "data-equation": eq.id, "aria-labelledby": `why-eq-${eq.id}` },
    el("h3", { id: `why-eq-${eq.id}` }, eq.title, el("span", { class: "why-section-ref", text: ` ${eq.section}` })),
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
  show(card, eq, eq.symbols[0].id);
  return card;
}

export async function render(root) {
  const { equations } = await api("/api/equations");
  root.replaceChildren(...equations.map(explainer));
}
