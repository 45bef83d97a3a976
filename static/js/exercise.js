// Progressive enhancement of the exercise sections of a lesson page. Without JavaScript the form
// posts normally, the result page refreshes itself, and every hint is its own <details>.
//
// With JavaScript:
// - the textarea becomes a CodeMirror 6 editor (static/vendor/codemirror/gradlab-editor.js),
//   hidden textarea kept in sync, Ctrl/Cmd+Enter submits;
// - drafts autosave per exercise (debounced) to /api/v1/drafts/{lesson}/{exercise}, falling back
//   to localStorage when that API is missing or fails; a saved draft that differs from the starter
//   code is restored on load, with "Reset to starter code";
// - the form is sent with fetch (all its fields, so hidden ones like csrf_token travel too); its
//   answer carries the result fragment as it is (queued), then one look, held by the server
//   until the verdict is stored, brings the verdict; a refusal (429, 503) is worded by the page;
// - the hint ladder reveals one hint at a time.
"use strict";

// CodeMirror mounts its base styles in a <style> element: the CSP lets it in with this
// response's nonce (this script element carries it; browsers expose it only as a property).
const CSP_NONCE = (document.currentScript && document.currentScript.nonce) || "";
const POLL_MS = 700;
const WAIT_S = 25; // how long the server may hold a look at a pending result
const SAVE_DELAY_MS = 1000;
const PENDING = new Set(["queued", "running"]);

function csrfHeaders() {
  const meta = document.querySelector('meta[name="csrf-token"]');
  return meta && meta.content ? { "X-CSRF-Token": meta.content } : {};
}

const local = {
  get(key) {
    try {
      return window.localStorage.getItem(key);
    } catch {
      return null; // storage disabled
    }
  },
  set(key, value) {
    try {
      window.localStorage.setItem(key, value);
      return true;
    } catch {
      return false;
    }
  },
  remove(key) {
    try {
      window.localStorage.removeItem(key);
    } catch {
      /* storage disabled */
    }
  },
};

// --- drafts ----------------------------------------------------------------------------------

function draftUrl(ref) {
  return "/api/v1/drafts/" + ref.split("/").map(encodeURIComponent).join("/");
}

const draftKey = (ref) => `gradlab:draft:${ref}`;

async function loadDraft(ref) {
  try {
    const response = await fetch(draftUrl(ref), {
      headers: { Accept: "application/json" },
      credentials: "same-origin",
      cache: "no-store",
    });
    if (response.ok) {
      const body = await response.json();
      if (body && typeof body.code === "string") return body.code;
    }
  } catch {
    /* no drafts API (yet), or offline: the browser's copy below */
  }
  return local.get(draftKey(ref));
}

async function saveDraft(ref, code) {
  try {
    const response = await fetch(draftUrl(ref), {
      method: "PUT",
      credentials: "same-origin",
      headers: { "Content-Type": "application/json", Accept: "application/json", ...csrfHeaders() },
      body: JSON.stringify({ code }),
    });
    if (response.ok) {
      local.remove(draftKey(ref)); // the server's copy is the one that counts now
      return "server";
    }
  } catch {
    /* fall back to the browser */
  }
  return local.set(draftKey(ref), code) ? "local" : null;
}

async function deleteDraft(ref) {
  try {
    await fetch(draftUrl(ref), {
      method: "DELETE",
      credentials: "same-origin",
      headers: { Accept: "application/json", ...csrfHeaders() },
    });
  } catch {
    /* offline: the next save replaces it */
  }
}

// --- results ---------------------------------------------------------------------------------

function lineOffset(text, number) {
  let offset = 0;
  for (let line = 1; line < number; line += 1) {
    const next = text.indexOf("\n", offset);
    if (next < 0) break;
    offset = next + 1;
  }
  return offset;
}

const countdowns = new Map(); // result slot -> its running job's countdown timer

function showTimeLeft(slot) {
  clearInterval(countdowns.get(slot));
  countdowns.delete(slot);
  const line = slot.querySelector(".time-left[data-wall-s][data-template]");
  if (!line) return;
  const ends = Date.now() + Number(line.dataset.wallS) * 1000;
  const tick = () => {
    const left = Math.max(0, Math.ceil((ends - Date.now()) / 1000));
    line.textContent = line.dataset.template.replace("{s}", String(left));
    if (left === 0 || !line.isConnected) clearInterval(countdowns.get(slot));
  };
  tick();
  countdowns.set(slot, setInterval(tick, 1000));
}

function enhanceResult(slot, exercise) {
  showTimeLeft(slot);
  for (const span of slot.querySelectorAll(".error-line[data-line]")) {
    const button = document.createElement("button");
    button.type = "button";
    button.className = "link-button error-line";
    button.dataset.line = span.dataset.line;
    button.textContent = span.textContent;
    button.addEventListener("click", () => exercise.goToLine(Number(button.dataset.line)));
    span.replaceWith(button);
  }
}

function announcement(slot) {
  const heading = slot.querySelector(".result-status");
  const score = slot.querySelector(".score");
  return [heading && heading.textContent.trim(), score && score.textContent.trim()]
    .filter(Boolean)
    .join(". ");
}

function show(exercise, html, status) {
  // Rendered by the server with autoescaping: learner output is text there.
  exercise.slot.innerHTML = html;
  enhanceResult(exercise.slot, exercise);
  exercise.announce(announcement(exercise.slot));
  if (status === "passed") {
    const badge = exercise.slot.closest("section.exercise")?.querySelector(".exercise-passed");
    if (badge) badge.hidden = false;
  }
}

async function poll(url, exercise, status) {
  // The form post brought the fragment as it was then (`status`, shown already). Each look is
  // held by the server until the verdict is stored (`until=done`; a job still running after a
  // second comes back once, to show its time left), so a quick grade takes a single look.
  let shown = typeof status === "string" ? status : null;
  while (shown === null || PENDING.has(shown)) {
    const asked = Date.now();
    const held =
      shown === null ? url : `${url}&wait=${WAIT_S}&until=done&shown=${encodeURIComponent(shown)}`;
    const response = await fetch(held, { headers: { Accept: "text/html" }, cache: "no-store" });
    if (!response.ok) throw new Error(`HTTP ${response.status}`);
    const html = await response.text();
    const now = response.headers.get("X-Gradlab-Status");
    const unchanged = now === shown;
    // replaced only when the status changes: assistive technology is told each thing once
    if (!unchanged) show(exercise, html, now);
    shown = now;
    // answered at once with nothing new (a busy server does not hold requests): ask later
    if (unchanged && Date.now() - asked < POLL_MS) {
      await new Promise((resolve) => setTimeout(resolve, POLL_MS));
    }
  }
}

// A refused submission (429 too many, 503 busy or queue full), worded by the page: what
// happened, then when to try again (the answer's Retry-After), never the API's English detail.
function retryText(messages, seconds) {
  if (!Number.isFinite(seconds) || seconds <= 0) return messages.msgRetrySoon;
  const minutes = seconds >= 120;
  const count = minutes ? Math.ceil(seconds / 60) : seconds;
  const lang = document.documentElement.lang || "en";
  const one = new Intl.PluralRules(lang).select(count) === "one";
  const unit = minutes ? "Minute" : "Second";
  return messages[`msgRetry${unit}${one ? "" : "s"}`].replace("{n}", String(count));
}

function refusalText(response, body, messages) {
  const reasons = {
    too_many_pending: messages.msgPending,
    worker_time: messages.msgWorkerTime,
    queue_full: messages.msgQueueFull,
  };
  const byStatus = { 429: messages.msgRateLimited, 503: messages.msgBusy };
  const what = reasons[body.reason] || byStatus[response.status];
  if (what) {
    const seconds = Number.parseInt(response.headers.get("Retry-After") || "", 10);
    return `${what} ${retryText(messages, seconds)}`;
  }
  // anything else the server words itself, in the page's language (too large, NUL...)
  if (typeof body.message === "string") return body.message;
  return typeof body.detail === "string" ? body.detail : messages.msgFailed;
}

function showRefusal(exercise, title, text) {
  const note = document.createElement("p");
  note.className = "notice refusal";
  const strong = document.createElement("strong");
  strong.textContent = title;
  note.append(strong, " ", text);
  exercise.slot.replaceChildren(note);
  exercise.announce(`${title}. ${text}`);
}

// --- one exercise ----------------------------------------------------------------------------

function setUpExercise(form) {
  const ref = form.dataset.exercise;
  const textarea = form.querySelector("textarea[name=code]");
  const submit = form.querySelector("button[type=submit]");
  const reset = form.querySelector(".reset-starter");
  const draftStatus = form.querySelector(".draft-status");
  const help = form.querySelector(".editor-help");
  const label = form.querySelector(`label[for="${textarea.id}"]`);
  const section = form.closest(".exercise") || form.parentElement;
  const slot = section.querySelector(".result-slot");
  const starter = textarea.defaultValue;
  const messages = form.dataset;

  const announcer = document.createElement("p");
  announcer.className = "visually-hidden";
  announcer.setAttribute("role", "status");
  slot.before(announcer);

  let editor = null;
  let restoring = false;
  let saveTimer = null;
  let busy = false;

  const getCode = () => (editor ? editor.getCode() : textarea.value);
  const say = (text) => {
    if (draftStatus) draftStatus.textContent = text || "";
  };
  const syncReset = () => {
    if (reset) reset.hidden = getCode() === starter;
  };

  async function saveNow() {
    clearTimeout(saveTimer);
    saveTimer = null;
    const code = getCode();
    if (code === starter) {
      // nothing of the learner's to keep: no draft at all, so that a page in another language
      // opens with its own starter instead of "restoring" this one
      local.remove(draftKey(ref));
      await deleteDraft(ref);
      say("");
      return;
    }
    const where = await saveDraft(ref, code);
    if (where === "server") say(messages.msgSaved);
    else if (where === "local") say(messages.msgSavedLocally);
  }

  function changed() {
    syncReset();
    if (restoring) return;
    clearTimeout(saveTimer);
    saveTimer = setTimeout(saveNow, SAVE_DELAY_MS);
  }

  function setCode(code) {
    restoring = true;
    if (editor) editor.setCode(code);
    else textarea.value = code;
    restoring = false;
    syncReset();
  }

  const exercise = {
    slot,
    announce(text) {
      announcer.textContent = text;
    },
    goToLine(number) {
      if (editor) {
        editor.goToLine(number);
        return;
      }
      const start = lineOffset(textarea.value, number);
      const end = textarea.value.indexOf("\n", start);
      textarea.focus();
      textarea.setSelectionRange(start, end < 0 ? textarea.value.length : end);
    },
  };

  if (window.GradlabEditor && typeof window.GradlabEditor.create === "function") {
    try {
      const attributes = {};
      if (label) {
        label.id = label.id || `${textarea.id}-label`;
        attributes["aria-labelledby"] = label.id;
      }
      if (help) attributes["aria-describedby"] = help.id;
      editor = window.GradlabEditor.create(textarea, {
        nonce: CSP_NONCE,
        attributes,
        onSubmit: () => form.requestSubmit(submit),
        onChange: changed,
      });
      form.classList.add("has-editor");
      if (label) label.addEventListener("click", () => editor.focus());
    } catch (error) {
      console.error("gradlab: the editor could not start; using the plain text box", error);
      editor = null;
      textarea.hidden = false;
    }
  }
  if (!editor) {
    textarea.addEventListener("input", changed);
    textarea.addEventListener("keydown", (event) => {
      if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) {
        event.preventDefault();
        form.requestSubmit(submit);
      }
    });
  }
  if (help) help.hidden = false;

  if (reset) {
    reset.addEventListener("click", () => {
      if (editor) editor.setCode(starter); // an edit: Ctrl+Z brings the draft back
      else textarea.value = starter;
      syncReset();
      changed();
      say(messages.msgReset);
      if (editor) editor.focus();
      else textarea.focus();
    });
  }

  loadDraft(ref).then((code) => {
    if (typeof code === "string" && code !== starter && getCode() === starter) {
      setCode(code);
      say(messages.msgRestored);
    }
  });
  window.addEventListener("pagehide", () => {
    if (saveTimer !== null) {
      clearTimeout(saveTimer);
      local.set(draftKey(ref), getCode()); // synchronous: the page is going away
    }
  });

  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    if (busy) return;
    busy = true;
    submit.disabled = true;
    if (editor) textarea.value = editor.getCode();
    if (saveTimer !== null) saveNow();
    try {
      const response = await fetch(form.action, {
        method: "POST",
        body: new URLSearchParams(new FormData(form)), // every field, hidden ones included
        credentials: "same-origin",
        headers: { Accept: "application/json", ...csrfHeaders() },
      });
      const body = (await response.json().catch(() => null)) || {};
      if (!response.ok) {
        showRefusal(exercise, messages.msgRefused, refusalText(response, body, messages));
        return;
      }
      const shown = typeof body.html === "string" ? body.status : null; // null: look first
      if (shown !== null) show(exercise, body.html, shown);
      await poll(body.fragment_url, exercise, shown);
    } catch (error) {
      console.error("gradlab: grading request failed", error);
      slot.textContent = messages.msgFailed;
      exercise.announce(slot.textContent);
    } finally {
      busy = false;
      submit.disabled = false;
    }
  });
}

// --- the hint ladder -------------------------------------------------------------------------

function setUpHints(ladder) {
  const items = Array.from(ladder.querySelectorAll("li.hint"));
  const button = ladder.querySelector(".hint-next");
  if (!button || items.length === 0) return;
  const key = `gradlab:hints:${ladder.dataset.hintLadder}`;
  let shown = Math.min(Number(local.get(key)) || 0, items.length);
  ladder.classList.add("is-ladder");

  function render(focusNewest) {
    items.forEach((item, index) => {
      item.hidden = index >= shown;
      if (index < shown) item.querySelector("details").open = true;
    });
    button.hidden = shown >= items.length;
    button.textContent = shown === 0 ? ladder.dataset.labelFirst : ladder.dataset.labelNext;
    if (focusNewest && shown > 0) items[shown - 1].focus();
  }

  button.addEventListener("click", () => {
    shown = Math.min(shown + 1, items.length);
    local.set(key, String(shown));
    render(true);
  });
  render(false);
}

for (const form of document.querySelectorAll("form.submit-form")) setUpExercise(form);
for (const ladder of document.querySelectorAll("[data-hint-ladder]")) setUpHints(ladder);
