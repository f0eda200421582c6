// Printing: every fold ("In words", "Why") opens for the handout and closes again afterwards, as
// the reader left it (the print stylesheet in explorer.css hides the controls).
let opened = [];
addEventListener("beforeprint", () => {
  opened = [...document.querySelectorAll("details:not([open])")];
  opened.forEach((d) => { d.open = true; });
});
addEventListener("afterprint", () => {
  opened.forEach((d) => { d.open = false; });
  opened = [];
});
