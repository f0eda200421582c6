// Presentation mode: one figure fills the screen at about twice the font size. The Fullscreen API
// when the browser allows it; the same CSS overlay (section.presenting) either way.

let current = null;

// The part of each presented figure that grows or shrinks to fill the screen: its font size,
// which its tables and squares are sized by (em). Other figures keep the CSS's sizes.
// The stepper's whole stage grows: its title, formula, words and the tables' headers and token
// labels scale with the values, not the values alone.
const FIT = { "figure-attention-stepper": ".stage", "figure-multi-head": "#mh-learned:not([hidden]) #learned-layers" };
// The range of font sizes tried, as shares of the CSS's: at most 2.4 times (a 3-token table is
// not a poster), at least a quarter (an 8 x 32 table still fits 1280 x 720).
const SCALE = { shrink: 0.25, grow: 2.4 };

// Whether the presented figure fits its box: nothing below, nothing beside, no box inside that
// scrolls sideways.
function fits(root, target) {
  if (root.scrollHeight > root.clientHeight + 1 || root.scrollWidth > root.clientWidth + 1) return false;
  return [target, ...target.querySelectorAll(".scroll")].every((e) => e.scrollWidth <= e.clientWidth + 1);
}

// The largest font size (within SCALE's shares of the CSS's) at which the figure fits, by
// bisection: each try is one layout, and nine of them pin it to within half a percent.
function fit(root) {
  const target = root.querySelector(FIT[root.id] ?? ":not(*)");
  if (!target) return;
  target.style.fontSize = "";
  const base = parseFloat(getComputedStyle(target).fontSize);
  let [lo, hi] = [SCALE.shrink, SCALE.grow];
  for (let n = 0; n < 9; n++) {
    const mid = (lo + hi) / 2;
    target.style.fontSize = `${base * mid}px`;
    if (fits(root, target)) lo = mid;
    else hi = mid;
  }
  target.style.fontSize = `${base * lo}px`;
  root.dataset.fit = lo.toFixed(3);
}

// Fit again on the next frame after the figure redraws (a step, a checkpoint) or the screen
// changes; the fit's own style changes are attributes, which the observer does not watch.
let pending = 0;
const refit = () => {
  cancelAnimationFrame(pending);
  pending = requestAnimationFrame(() => current && fit(current));
};
const watcher = new MutationObserver(refit);
addEventListener("resize", refit);

function unfit(root) {
  watcher.disconnect();
  delete root.dataset.fit;
  const target = root.querySelector(FIT[root.id] ?? ":not(*)");
  if (target) target.style.fontSize = "";
}

function changed(root) {
  root.dispatchEvent(new CustomEvent("presentchange", { detail: root.classList.contains("presenting") }));
}

export function exitPresentation() {
  if (!current) return;
  const root = current;
  current = null;
  root.classList.remove("presenting");
  unfit(root);
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
  watcher.observe(root, { childList: true, subtree: true, characterData: true });
  refit();
  changed(root);
}

export const isPresenting = (root) => current === root;

document.addEventListener("fullscreenchange", () => {
  if (!document.fullscreenElement && current) exitPresentation();
});
document.addEventListener("keydown", (event) => {
  if (event.key === "Escape" && current) exitPresentation();
});
