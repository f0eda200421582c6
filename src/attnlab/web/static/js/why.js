// Section "The why": the chapter's reasoning (equation explainers, the √d_k proof measured step
// by step). Filled in by its own module so the figures' modules stay one concept each.
export async function init() {
  const root = document.getElementById("why-root");
  root.hidden = true;
}
