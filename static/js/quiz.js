// The lesson's quick check, answered in place. Without JavaScript the form posts and the lesson
// comes back with `?quiz=correct|wrong` (the learner's choice is gone then). With it, the same
// post asks for JSON: the page stays, the chosen option stays checked, and the outcome the
// server rendered in the page's language (right or wrong; the explanation once right) appears
// under the form. If the post fails, the form is sent the plain way, whose page says why.
"use strict";

(() => {
  for (const form of document.querySelectorAll("form.quiz")) {
    const feedback = form.parentElement.querySelector(".quiz-feedback");
    const button = form.querySelector("button[type=submit]");
    if (!feedback || !button) continue;
    let busy = false;

    form.addEventListener("submit", async (event) => {
      event.preventDefault();
      if (busy) return;
      busy = true;
      button.disabled = true;
      const meta = document.querySelector('meta[name="csrf-token"]');
      let body = null;
      try {
        const response = await fetch(form.action, {
          method: "POST",
          body: new URLSearchParams(new FormData(form)), // the answer and the csrf_token
          credentials: "same-origin",
          headers: {
            Accept: "application/json",
            ...(meta && meta.content ? { "X-CSRF-Token": meta.content } : {}),
          },
        });
        if (response.ok) body = await response.json();
      } catch (error) {
        console.error("gradlab: the quiz answer was not sent", error);
      } finally {
        busy = false;
        button.disabled = false;
      }
      if (!body || typeof body.html !== "string") {
        form.submit(); // the plain post (no submit event): its page says what went wrong
        return;
      }
      // Rendered by the server (autoescaped; the explanation is the lesson's own markdown).
      feedback.innerHTML = body.html;
      form.dataset.outcome = body.outcome;
    });
  }
})();
