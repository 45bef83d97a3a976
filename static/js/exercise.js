// Progressive enhancement of the exercise form: submit in place and poll the result fragment.
// Without JavaScript the form posts normally and the result page refreshes itself.
"use strict";

const POLL_MS = 700;

async function poll(url, slot) {
  for (;;) {
    const response = await fetch(url, { headers: { Accept: "text/html" }, cache: "no-store" });
    if (!response.ok) throw new Error(`HTTP ${response.status}`);
    // The fragment is rendered by the server with autoescaping: learner output is text there.
    slot.innerHTML = await response.text();
    const status = response.headers.get("X-Gradlab-Status");
    if (status !== "queued" && status !== "running") return;
    await new Promise((resolve) => setTimeout(resolve, POLL_MS));
  }
}

for (const form of document.querySelectorAll("form.submit-form")) {
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const slot = form.parentElement.querySelector(".result-slot");
    const button = form.querySelector("button[type=submit]");
    button.disabled = true;
    try {
      const response = await fetch(form.action, {
        method: "POST",
        body: new URLSearchParams(new FormData(form)),
        headers: { Accept: "application/json" },
      });
      const body = await response.json();
      if (!response.ok) {
        slot.textContent = typeof body.detail === "string" ? body.detail : JSON.stringify(body.detail);
        return;
      }
      await poll(body.fragment_url, slot);
    } catch (error) {
      slot.textContent = String(error);
    } finally {
      button.disabled = false;
    }
  });
}
