// Section "The why": the chapter's reasoning. Every equation explained symbol by symbol, the √d_k
// proof measured step by step, and a predict-first card per figure; each part starts on its own.
// Nothing heavy runs at load: the proof draws its samples only when its fold is first opened,
// and each figure's folded why (beside the figure) fills when it is opened.
import { showError } from "./common.js";
import * as explain from "./explain.js";
import * as predict from "./predict.js";
import * as proof from "./proof.js";

// Run start() once, when the fold first opens (at once if it already is).
function whenOpened(fold, start) {
  let started = null;
  const go = () => { started ??= start(); return started; };
  if (fold.open) return go();
  fold.addEventListener("toggle", () => { if (fold.open) go(); });
  return Promise.resolve();
}

export async function init() {
  const root = document.getElementById("why-root");
  const report = (err) => showError(root.parentElement.querySelector(".error"), err);
  whenOpened(document.getElementById("why-proof-fold"), () =>
    proof.render(document.getElementById("why-proof-box")).catch(report));
  explain.besides(report);
  const parts = [
    [explain, "why-equations"],
    [predict, "why-predict"],
  ];
  const results = await Promise.allSettled(parts.map(([module, id]) => module.render(document.getElementById(id))));
  const failed = results.filter((r) => r.status === "rejected");
  if (failed.length) report(failed[0].reason);
}
