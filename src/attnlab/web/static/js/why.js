// Section "The why": the chapter's reasoning. Every equation explained symbol by symbol, the √d_k
// proof measured step by step, and a predict-first card per figure; each part starts on its own.
import { showError } from "./common.js";
import * as explain from "./explain.js";
import * as predict from "./predict.js";
import * as proof from "./proof.js";

export async function init() {
  const root = document.getElementById("why-root");
  const parts = [
    [explain, "why-equations"],
    [proof, "why-proof-box"],
    [predict, "why-predict"],
  ];
  const results = await Promise.allSettled(parts.map(([module, id]) => module.render(document.getElementById(id))));
  const failed = results.filter((r) => r.status === "rejected");
  if (failed.length) showError(root.parentElement.querySelector(".error"), failed[0].reason);
}
