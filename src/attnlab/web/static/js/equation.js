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
    if (s) button.setAttribute("aria-label", `${button.textContent.trim()}: ${s.name}`); // starts with what it shows
    for (const event of ["focus", "mouseenter", "click"]) button.addEventListener(event, () => show(button.dataset.symbol));
  });
  roving(root.querySelector(".equation"));
  show("attention");
}

// The equation is one tab stop (a toolbar): the arrow keys, Home and End move between its
// symbols, so a keyboard reader reaches the figures after it in a few presses.
function roving(bar) {
  const buttons = [...bar.querySelectorAll(".sym")];
  const focusOn = (n) => {
    buttons.forEach((b, k) => { b.tabIndex = k === n ? 0 : -1; });
    buttons[n].focus();
  };
  buttons.forEach((b, k) => { b.tabIndex = k ? -1 : 0; });
  bar.addEventListener("keydown", (event) => {
    const n = buttons.indexOf(document.activeElement);
    if (n < 0) return;
    const to = { ArrowRight: n + 1, ArrowDown: n + 1, ArrowLeft: n - 1, ArrowUp: n - 1, Home: 0, End: buttons.length - 1 }[event.key];
    if (to === undefined) return;
    event.preventDefault();
    focusOn((to + buttons.length) % buttons.length);
  });
}
