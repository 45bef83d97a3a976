// Hints opened: when a learner reveals hint N of an exercise (the ladder's button of
// static/js/exercise.js, or a hint's own <details>), POST /api/v1/progress/hints records hints
// 1..N for class insight (docs/api.md). Loaded on every page; it only acts where there is a hint
// ladder. CSP-friendly: no inline code. Reports only a higher hint than already reported here.
"use strict";

(() => {
  if (!document.querySelector("[data-hint-ladder]")) return;
  const reported = new Map();

  function report(ladder, hint) {
    const exercise = ladder.dataset.hintLadder;
    if (!exercise || hint < 1 || (reported.get(exercise) || 0) >= hint) return;
    reported.set(exercise, hint);
    const meta = document.querySelector('meta[name="csrf-token"]');
    fetch("/api/v1/progress/hints", {
      method: "POST",
      credentials: "same-origin",
      headers: {
        "Content-Type": "application/json",
        Accept: "application/json",
        ...(meta && meta.content ? { "X-CSRF-Token": meta.content } : {}),
      },
      body: JSON.stringify({ exercise, hint }),
    }).catch(() => undefined); // offline: counted the next time
  }

  // After the ladder's own handler has run (this one listens on the document): the number of
  // hints now shown. A click on a hint's summary that opens it: that hint's number.
  document.addEventListener("click", (event) => {
    const ladder = event.target.closest && event.target.closest("[data-hint-ladder]");
    if (!ladder) return;
    const items = Array.from(ladder.querySelectorAll("li.hint"));
    if (event.target.closest(".hint-next")) {
      report(ladder, items.filter((item) => !item.hidden).length);
      return;
    }
    const summary = event.target.closest("li.hint summary");
    if (summary && !summary.parentElement.open) {
      report(ladder, items.indexOf(summary.closest("li.hint")) + 1);
    }
  });
})();
