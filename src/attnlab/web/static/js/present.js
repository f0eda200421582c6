// Presentation mode: one figure fills the screen at about twice the font size. The Fullscreen API
// when the browser allows it; the same CSS overlay (section.presenting) either way.

let current = null;

function changed(root) {
  root.dispatchEvent(new CustomEvent("presentchange", { detail: root.classList.contains("presenting") }));
}

export function exitPresentation() {
  if (!current) return;
  const root = current;
  current = null;
  root.classList.remove("presenting");
  document.body.classList.remove("has-presentation");
  root.querySelector(".present-button")?.setAttribute("aria-pressed", "false");
  if (document.fullscreenElement) document.exitFullscreen().catch(() => {});
  changed(root);
  root.querySelector(".present-button")?.focus();
}

export function togglePresentation(root) {
  if (current === root) {
    exitPresentation();
    return;
  }
  exitPresentation();
  current = root;
  root.classList.add("presenting");
  document.body.classList.add("has-presentation");
  root.querySelector(".present-button")?.setAttribute("aria-pressed", "true");
  root.requestFullscreen?.().catch(() => {}); // refused (no user gesture, a kiosk): the overlay stays
  changed(root);
}

export const isPresenting = (root) => current === root;

document.addEventListener("fullscreenchange", () => {
  if (!document.fullscreenElement && current) exitPresentation();
});
document.addEventListener("keydown", (event) => {
  if (event.key === "Escape" && current) exitPresentation();
});
