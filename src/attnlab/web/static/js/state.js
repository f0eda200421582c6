// Every figure's state lives in the page's URL query, so a link or a reload shows the same thing.
//   ?stepper.step=weights&stepper.cell=2,1&hist.dk=128&perm.order=5,2,3,4,1&mh.word=8 ...
// A control the reader changes pushes a history entry (Back undoes it); a passing change (a
// picked cell, a slider being dragged) replaces the current one. On Back and Forward every
// figure reads the URL again through the callbacks given to onUrlChange.

const listeners = [];
let seen = location.search; // the query the figures last showed

export function readUrl(key) {
  return new URLSearchParams(location.search).get(key);
}

// entries: { key: value }; null, undefined or "" removes the key (its default applies).
export function writeUrl(entries, { push = true } = {}) {
  const params = new URLSearchParams(location.search);
  for (const [key, value] of Object.entries(entries)) {
    if (value === null || value === undefined || value === "") params.delete(key);
    else params.set(key, String(value));
  }
  const search = params.toString().replaceAll("%2C", ",").replaceAll("%3B", ";");
  const url = `${location.pathname}${search ? `?${search}` : ""}${location.hash}`;
  if (url === `${location.pathname}${location.search}${location.hash}`) return;
  history[push ? "pushState" : "replaceState"](history.state, "", url);
  seen = location.search;
}

export function onUrlChange(callback) {
  listeners.push(callback);
}

// Every figure reads the URL again now (a page-wide setting changed, such as the digits shown).
export function redrawAll() {
  seen = location.search;
  return Promise.allSettled(listeners.map((callback) => callback()));
}

// A click on an in-page link (#figure-...) also fires popstate: only a changed query is news.
window.addEventListener("popstate", () => {
  if (location.search === seen) return;
  seen = location.search;
  listeners.forEach((callback) => callback());
});

// The link to one figure in its current state: the whole query (so every figure comes along)
// and the figure's anchor.
export function linkTo(figureId) {
  return `${location.origin}${location.pathname}${location.search}#${figureId}`;
}

// Matrices travel as "1,0;0,1" (rows split by ";"), lists as "1,2,3".
export const matrixToUrl = (m) => m.map((row) => row.join(",")).join(";");
export function matrixFromUrl(text) {
  if (!text) return null;
  const m = text.split(";").map((row) => row.split(",").map(Number));
  return m.every((row) => row.every(Number.isFinite)) ? m : null;
}
export function listFromUrl(text) {
  if (!text) return null;
  const list = text.split(",").map(Number);
  return list.every(Number.isInteger) ? list : null;
}
