// Predict first (GET /api/predict): each figure's question is answered before the figure shows
// it. A guess is checked in the browser against the server's answer (a number within its
// tolerance, or the right choice) and kept in sessionStorage: a reload keeps it, a new browser
// session starts blank, so a teacher who rehearsed does not show the class every answer. Each
// card has its own reset, and the page one for all of them.
import { api, el } from "./common.js";
import * as stepper from "./stepper.js";

const STORE = "attnlab.predict.";

function remember(id, guess) {
  try { sessionStorage.setItem(STORE + id, JSON.stringify(guess)); } catch { /* storage off: fine */ }
}

function recall(id) {
  try { return JSON.parse(sessionStorage.getItem(STORE + id)); } catch { return null; }
}

function forget(id) {
  try { sessionStorage.removeItem(STORE + id); } catch { /* storage off: nothing kept */ }
}

// Back to the question: no guess, no verdict, the answer hidden again.
function reset(card, p) {
  forget(p.id);
  card.querySelector("form").reset();
  delete card.dataset.result;
  card.querySelector(".why-verdict").textContent = "";
  card.querySelector(".why-answer").hidden = true;
  card.querySelector(".why-reset").hidden = true;
}

function guessOf(card, p) {
  if (p.kind === "number") {
    const text = card.querySelector("input[type=number]").value.trim();
    return text === "" ? null : Number(text);
  }
  const picked = card.querySelector("input[type=radio]:checked");
  return picked ? Number(picked.value) : null;
}

export function isRight(p, guess) {
  if (p.kind === "number") return Math.abs(guess - p.answer) <= p.tolerance;
  return guess === p.answer;
}

// Set the figure up so it shows the answer: toggles, a slider, a button.
function showInFigure(p) {
  for (const a of p.show) {
    const node = document.querySelector(a.selector);
    if (!node) continue;
    if (a.do === "click") node.click();
    else if (a.do === "check" || a.do === "uncheck") {
      if (node.checked !== (a.do === "check")) {
        node.checked = a.do === "check";
        node.dispatchEvent(new Event("change", { bubbles: true }));
      }
    } else if (a.do === "value") {
      node.value = a.value;
      node.dispatchEvent(new Event("input", { bubbles: true }));
      node.dispatchEvent(new Event("change", { bubbles: true }));
    }
  }
  if (p.step) setTimeout(() => stepper.goToStep?.(p.step), 400); // after the stepper refreshes
}

function verdict(card, p, guess) {
  const right = isRight(p, guess);
  const said = p.kind === "number" ? `${guess.toLocaleString("en", { maximumFractionDigits: 3 })}${p.unit === "%" ? "%" : ` ${p.unit}`}` : `“${p.choices[guess]}”`;
  card.dataset.result = right ? "right" : "wrong";
  card.querySelector(".why-verdict").replaceChildren(
    el("strong", { text: right ? "Right. " : "Not quite. " }), `You predicted ${said}.`);
  card.querySelector(".why-answer").hidden = false;
  card.querySelector(".why-reset").hidden = false;
}

function check(card, p) {
  const guess = guessOf(card, p);
  const note = card.querySelector(".why-verdict");
  if (guess === null || Number.isNaN(guess)) {
    note.textContent = p.kind === "number" ? "Type a number first." : "Pick one answer first.";
    return;
  }
  remember(p.id, guess);
  verdict(card, p, guess);
}

function card(p) {
  const id = `why-predict-${p.id}`;
  const input = p.kind === "number"
    ? el("label", { class: "why-guess" }, "Your prediction ",
        el("input", { type: "number", id: `${id}-guess`, step: "any", inputmode: "decimal" }), ` ${p.unit}`)
    : el("fieldset", { class: "why-choices" }, el("legend", { text: "Your prediction" }),
        p.choices.map((c, i) => el("label", {}, el("input", { type: "radio", name: id, value: i }), ` ${c}`)));
  const node = el("article", { class: "why-card predict", id, "data-prompt": p.id, "data-figure": p.figure },
    el("h3", {}, "Predict, then look: ", el("a", { href: `#${p.figure}`, text: p.figure_title })),
    el("p", { class: "why-question", text: p.question }),
    el("form", { class: "why-predict-form" }, input, el("button", { type: "submit", class: "why-check" }, "Check my prediction")),
    el("p", { class: "why-verdict", role: "status", "aria-live": "polite" }),
    el("div", { class: "why-answer", hidden: true },
      el("p", { text: p.answer_text }),
      el("a", { href: `#${p.figure}`, class: "why-link", onclick: () => showInFigure(p) }, "Show me in the figure →")),
    el("button", { type: "button", class: "why-reset", hidden: true, onclick: () => reset(node, p) }, "Reset this card"),
  );
  node.querySelector("form").addEventListener("submit", (event) => {
    event.preventDefault();
    check(node, p);
  });
  const saved = recall(p.id);
  if (saved !== null && saved !== undefined) {
    if (p.kind === "number") node.querySelector("input").value = String(saved);
    else node.querySelector(`input[value="${saved}"]`)?.setAttribute("checked", "");
    verdict(node, p, saved);
  }
  return node;
}

export async function render(root) {
  const { prompts } = await api("/api/predict");
  const cards = prompts.map(card);
  root.replaceChildren(...cards);
  document.getElementById("why-predict-reset")?.addEventListener("click", () => {
    cards.forEach((node, n) => reset(node, prompts[n]));
  });
}
