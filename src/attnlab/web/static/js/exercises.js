// Exercises: answer, then get them checked (POST /api/exercises/N/check).
import { api, el } from "./common.js";

const root = document.getElementById("exercises");

function card(ex) {
  const id = `exercise-${ex.number}`;
  const verdict = el("p", { class: "verdict", role: "status", "aria-live": "polite" });
  const solution = el("div", { class: "solution", hidden: true });
  const field = ex.numeric
    ? el("input", { id: `${id}-answer`, type: "text", inputmode: "decimal", autocomplete: "off" })
    : el("textarea", { id: `${id}-answer`, rows: 2, cols: 60 });
  const form = el("form", { class: "answer" },
    el("label", { for: `${id}-answer` }, ex.numeric ? "Your answer (a number): " : "Your answer, in your own words: "),
    field, " ",
    el("button", { type: "submit" }, ex.numeric ? "Check" : "Compare with the solution"));
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const raw = field.value.trim();
    const number = Number(raw);
    const answer = ex.numeric && raw !== "" && Number.isFinite(number) ? number : raw;
    try {
      const v = await api(`/api/exercises/${ex.number}/check`, { method: "POST", body: { answer } });
      verdict.className = `verdict ${v.correct === true ? "correct" : v.correct === false ? "wrong" : ""}`;
      verdict.textContent = `${v.correct === true ? "✓ " : v.correct === false ? "✗ " : ""}${v.message}`;
      solution.replaceChildren(el("strong", { text: "Worked solution: " }), v.solution);
      solution.hidden = false;
    } catch (err) {
      verdict.className = "verdict wrong";
      verdict.textContent = `✗ ${err.message}`;
    }
  });
  return el("article", { class: "exercise", id, "data-number": ex.number },
    el("h3", {}, `Exercise ${ex.number} (${ex.kind})`),
    el("p", { text: ex.question }),
    form, verdict, solution);
}

export async function init() {
  const list = await api("/api/exercises");
  root.querySelector("#exercise-list").replaceChildren(...list.map(card));
}
