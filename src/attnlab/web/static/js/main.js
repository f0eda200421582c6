// Start every section on its own, so one that fails cannot stop the others.
import { chartsDrawn, config, fillConfig, setDigits } from "./common.js";
import * as equation from "./equation.js";
import * as exercises from "./exercises.js";
import * as histogram from "./histogram.js";
import * as labs from "./labs.js";
import * as multihead from "./multihead.js";
import * as permutation from "./permutation.js";
import { onUrlChange, readUrl, redrawAll, writeUrl } from "./state.js";
import * as stepper from "./stepper.js";
import * as why from "./why.js";

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

const sections = { stepper, equation, why, histogram, permutation, multihead, labs, exercises };

// The numbers quoted in the page's text come from the server's config, like the figures' own.
const words = { init: async () => fillConfig(await config()) };

const started = Object.entries({ words, ...sections }).map(async ([name, module]) => {
  try {
    await module.init();
  } catch (err) {
    const box = document.querySelector(`[data-section="${name}"] .error`);
    if (box) {
      box.textContent = `This section could not start: ${err.message}`;
      box.hidden = false;
    }
    console.error(name, err);
  }
});

// Ready: every section started and every chart it asked for drawn. The mark lets a test read
// the time from navigation start (performance.getEntriesByName("attnlab-ready")).
Promise.allSettled(started).then(chartsDrawn).then(() => {
  performance.mark("attnlab-ready");
  document.body.setAttribute("data-ready", "true");
});
