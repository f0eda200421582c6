// The equation explainer: each symbol says what it is, its shape, and where the page shows it.
import { api, el } from "./common.js";
import { goToStep } from "./stepper.js";

const root = document.getElementById("equation");
const info = root.querySelector("#symbol-info");
let symbols = {};

function show(id) {
  const s = symbols[id];
  if (!s) return;
  root.querySelectorAll(".sym").forEach((b) => b.classList.toggle("current", b.dataset.symbol === id));
  const link = el("a", {
    href: `#${s.target}`,
    onclick: () => {
      if (s.step && s.target === "figure-attention-stepper") goToStep(s.step);
    },
  }, s.target === "figure-attention-stepper" ? `See it in the stepper (step “${s.step}”)` : "See it in the √d_k figure");
  info.replaceChildren(
    el("h3", {}, el("span", { class: "sym-text", text: s.text }), ` — ${s.name}`),
    el("p", { text: s.what }),
    el("p", {}, el("strong", { text: "Shape: " }), s.shape),
    el("p", {}, link),
  );
}

export async function init() {
  const fig = await api("/api/equation");
  symbols = Object.fromEntries(fig.symbols.map((s) => [s.id, s]));
  root.querySelectorAll(".sym").forEach((button) => {
    const s = symbols[button.dataset.symbol];
    if (s) button.setAttribute("aria-label", `${s.text}: ${s.name}`);
    for (const event of ["focus", "mouseenter", "click"]) button.addEventListener(event, () => show(button.dataset.symbol));
  });
  show("attention");
}
