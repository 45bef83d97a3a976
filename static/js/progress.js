// Reading progress: reports the lesson section in view (debounced) and marks the lesson read
// when the recap is reached, with PUT /api/v1/progress/{lesson}. Loaded on every page; it only
// acts on lesson pages (/{locale}/lessons/{lesson}). CSP-friendly: no inline code or styles.
// The X-CSRF-Token header carries the token of <meta name="csrf-token"> (app/security/csrf.py).
"use strict";

(() => {
  const match = window.location.pathname.match(/^\/[a-z]{2}\/lessons\/([a-z0-9-]+)\/?$/);
  const article = document.querySelector("article.lesson");
  if (!match || !article) return;
  markPassedExercises();
  if (!("IntersectionObserver" in window)) return;

  const url = `/api/v1/progress/${encodeURIComponent(match[1])}`;
  const DELAY_MS = 1500;
  const sections = Array.from(article.querySelectorAll("section.section[id], section.exercise[id]"));
  const recap = article.querySelector("section.section-recap");
  const visible = new Set();
  let timer = null;
  let reported = null;
  let pending = null;
  let readSent = false;

  function send(body, keepalive = false) {
    const meta = document.querySelector('meta[name="csrf-token"]');
    return fetch(url, {
      method: "PUT",
      credentials: "same-origin",
      keepalive,
      headers: {
        "Content-Type": "application/json",
        Accept: "application/json",
        ...(meta && meta.content ? { "X-CSRF-Token": meta.content } : {}),
      },
      body: JSON.stringify(body),
    }).catch(() => undefined); // offline: the next report will do
  }

  function flush(keepalive = false) {
    if (timer !== null) window.clearTimeout(timer);
    timer = null;
    if (pending === null || pending === reported) return;
    reported = pending;
    send({ last_section: pending }, keepalive);
  }

  // The exercises this learner has passed already get their badge (the page itself is the same
  // for everybody: app/page_cache.py).
  function markPassedExercises() {
    fetch("/api/v1/progress", {
      headers: { Accept: "application/json" },
      credentials: "same-origin",
      cache: "no-store",
    })
      .then((response) => (response.ok ? response.json() : null))
      .then((body) => {
        const lesson = body && body.lessons && body.lessons[match[1]];
        for (const [ref, state] of Object.entries((lesson && lesson.exercises) || {})) {
          const badge = article.querySelector(`.exercise-passed[data-exercise="${CSS.escape(ref)}"]`);
          if (badge && state === "passed") badge.hidden = false;
        }
      })
      .catch(() => undefined); // offline: no badges, nothing else lost
  }

  function current() {
    // the first section (in page order) that is in view
    return sections.find((section) => visible.has(section)) || null;
  }

  const observer = new IntersectionObserver(
    (entries) => {
      for (const entry of entries) {
        if (entry.isIntersecting) visible.add(entry.target);
        else visible.delete(entry.target);
      }
      const section = current();
      if (section === null || section.id === pending) return;
      pending = section.id;
      if (timer !== null) window.clearTimeout(timer);
      timer = window.setTimeout(() => flush(), DELAY_MS);
    },
    { rootMargin: "-20% 0px -50% 0px" },
  );
  for (const section of sections) observer.observe(section);
  // The recap in view (any part of it, anywhere on screen): the lesson has been read.
  if (recap !== null) {
    const recapObserver = new IntersectionObserver((entries) => {
      if (readSent || !entries.some((entry) => entry.isIntersecting)) return;
      readSent = true;
      recapObserver.disconnect();
      send({ read: true });
    });
    recapObserver.observe(recap);
  }
  // Leaving the page before the delay ran out: send the last position anyway.
  window.addEventListener("pagehide", () => flush(true));
  // Opened at a #section (e.g. "Continue where you left off"): that is the position.
  if (window.location.hash) reported = window.location.hash.slice(1);
})();
