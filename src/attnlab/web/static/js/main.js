// Start every section on its own, so one that fails cannot stop the others.
import { chartsDrawn, chartsWanted, config, fillConfig, loadPlotly, setDigits } from "./common.js";
import * as equation from "./equation.js";
import { onUrlChange, readUrl, redrawAll, writeUrl } from "./state.js";
import * as stepper from "./stepper.js";
import "./print.js"; // the folds open for a printed handout

// The digits every number shows (digits= in the URL, 4 when absent), set before any figure draws.
const digitsBox = document.querySelector("#digits");
const choices = [...digitsBox.options].map((o) => Number(o.value)); // the first is the default
const readDigits = () => { digitsBox.value = String(setDigits(Number(readUrl("digits")), choices)); };
readDigits();
onUrlChange(readDigits);
digitsBox.addEventListener("change", () => {
  const d = setDigits(Number(digitsBox.value), choices);
  writeUrl({ digits: d === choices[0] ? null : d });
  redrawAll();
});

// Each section's module. The first screen's are imported above, so the browser fetches (and
// pagefiles.py preloads) only their graph before ready; the rest load after it, by import().
const sections = {
  stepper: async () => stepper,
  equation: async () => equation,
  why: () => import("./why.js"),
  histogram: () => import("./histogram.js"),
  permutation: () => import("./permutation.js"),
  multihead: () => import("./multihead.js"),
  labs: () => import("./labs.js"),
  runs: () => import("./runs.js"), // training on the page, as jobs
  knockout: () => import("./knockout.js"), // the learned view's heads knocked out
  exercises: () => import("./exercises.js"),
};

// The numbers quoted in the page's text come from the server's config, like the figures' own.
const words = async () => ({ init: async () => fillConfig(await config()) });

// The first screen: the page's words, the equation and the stepper, and the section a link's
// #fragment opens on (#figure-multi-head is a first screen too). The others start just after.
const fragment = () => { try { return decodeURIComponent(location.hash.slice(1)); } catch { return ""; } }; // "#%E0" too
const opened = document.getElementById(fragment())?.closest("[data-section]");
const isFirst = (name) => ["words", "equation", "stepper", opened?.dataset.section].includes(name);
const all = Object.entries({ words, ...sections });

const start = (list) => list.map(async ([name, load]) => {
  try {
    await (await load()).init();
  } catch (err) {
    const box = document.querySelector(`[data-section="${name}"] .error`);
    if (box) {
      box.textContent = `This section could not start: ${err.message}`;
      box.hidden = false;
    }
    console.error(name, err);
  }
});

// Ready: the first screen's sections started (tables filled, controls live); no chart is needed
// for it, so plotly.js loads later (common.js: once the browser is idle after every section has
// started, or sooner when a chart comes near the viewport). Charts: every section started and
// every chart asked for drawn. Each mark lets a test read its time from navigation start
// (performance.getEntriesByName("attnlab-ready"), "attnlab-charts").
const idle = () => new Promise((resolve) => (window.requestIdleCallback ? requestIdleCallback(resolve, { timeout: 400 }) : setTimeout(resolve, 50)));
const first = Promise.allSettled(start(all.filter(([name]) => isFirst(name)))).then(() => {
  performance.mark("attnlab-ready");
  document.body.setAttribute("data-ready", "true");
});
// (after a task boundary, so the browser can paint the first screen before the rest is built)
first.then(() => new Promise((resolve) => setTimeout(resolve, 0)))
  .then(() => Promise.allSettled(start(all.filter(([name]) => !isFirst(name)))))
  .then(() => Promise.race([idle(), chartsWanted()])).then(loadPlotly).then(chartsDrawn).then(() => {
    performance.mark("attnlab-charts");
    document.body.setAttribute("data-charts", "drawn");
  });

// "Save as one file": the page at its current state as one self-contained HTML file (GET
// /snapshot, web/snapshot.py), to hand out or open from disk. A saved page says it is one.
const footer = document.querySelector("footer.site");
if (footer && !window.attnlabSnapshot) {
  const save = document.createElement("a");
  save.id = "save-one-file";
  save.textContent = "Save this page as one file";
  save.setAttribute("download", "attnlab-explorer.html");
  const point = () => { save.href = `/snapshot?state=${encodeURIComponent(location.search.slice(1))}`; };
  point();
  save.addEventListener("click", point);
  const line = Object.assign(document.createElement("p"), { className: "save-one-file" });
  line.append(save, " (the figures at their present state, plotly.js included: opens from disk, no server)");
  footer.prepend(line);
} else if (footer) {
  footer.prepend(Object.assign(document.createElement("p"), { id: "snapshot-note", textContent: "A saved copy of the attnlab explorer: every figure shows the state it was saved at; changing a figure's input, running a lab or checking an answer needs the explorer's server (attnlab serve)." }));
}
