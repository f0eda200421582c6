// Play/Pause for a walk through steps (the stepper, on the page and in Present mode): Play steps
// forward at the pace chosen, one step per tick, and stops by itself at the last step; Pause, a
// step taken by hand, or leaving the page's tab stops it. The button says which it will do
// (aria-pressed while playing), so a screen reader and a projector both read the state.

// { button, pace (a <select> of seconds), step() -> true while there is a next step }
export function player({ button, pace, step }) {
  let timer = null;
  const playing = () => timer !== null;
  const show = () => {
    button.setAttribute("aria-pressed", String(playing()));
    button.textContent = playing() ? "❚❚ Pause" : "▶ Play";
  };
  const stop = () => {
    clearInterval(timer);
    timer = null;
    show();
  };
  const tick = () => {
    if (!step()) stop();
  };
  const start = () => {
    stop();
    if (!step()) return; // already at the last step: nothing to play
    timer = setInterval(tick, Number(pace.value) * 1e3); // seconds, in ms
    show();
  };
  button.addEventListener("click", () => (playing() ? stop() : start()));
  pace.addEventListener("change", () => playing() && start());
  document.addEventListener("visibilitychange", () => document.hidden && stop());
  show();
  return { stop, playing };
}
