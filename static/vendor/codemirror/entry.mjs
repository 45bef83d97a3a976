// Entry of gradlab's editor bundle: CodeMirror 6 with Python, built into gradlab-editor.js by
// scripts/build-editor.sh (esbuild, IIFE exposing the global `GradlabEditor`).
//
// Content-Security-Policy: CodeMirror mounts its base styles through style-mod, which adds a
// <style> element to the document. The page's CSP allows styles from 'self' plus a per-response
// nonce; `create` passes that nonce to EditorView.cspNonce so the element carries it. Colours
// (syntax, gutters, selection) live in /static/css/editor.css: tokens get the static `tok-*`
// classes of @lezer/highlight's classHighlighter instead of generated theme classes.
import { closeBrackets, closeBracketsKeymap } from "@codemirror/autocomplete";
import { defaultKeymap, history, historyKeymap, indentWithTab } from "@codemirror/commands";
import { python } from "@codemirror/lang-python";
import { bracketMatching, indentOnInput, indentUnit, syntaxHighlighting } from "@codemirror/language";
import { EditorSelection, EditorState } from "@codemirror/state";
import {
  EditorView,
  drawSelection,
  highlightActiveLine,
  highlightActiveLineGutter,
  keymap,
  lineNumbers,
} from "@codemirror/view";
import { classHighlighter } from "@lezer/highlight";

/**
 * Replace a <textarea> by an editor and keep the textarea's value in sync (the form still
 * submits the textarea). Options: nonce (CSP), attributes for the editable element (e.g.
 * aria-labelledby, aria-describedby), onSubmit() for Ctrl/Cmd+Enter, onChange(code) after edits.
 */
export function create(textarea, { nonce = "", attributes = {}, onSubmit, onChange } = {}) {
  const submitKey = {
    key: "Mod-Enter",
    preventDefault: true,
    run: () => {
      if (onSubmit) onSubmit();
      return true;
    },
  };
  const contentAttributes = { ...attributes };
  const view = new EditorView({
    parent: textarea.parentElement,
    state: EditorState.create({
      doc: textarea.value,
      extensions: [
        EditorView.cspNonce.of(nonce),
        lineNumbers(),
        highlightActiveLineGutter(),
        highlightActiveLine(),
        history(),
        drawSelection(),
        indentOnInput(),
        indentUnit.of("    "),
        EditorState.tabSize.of(4),
        bracketMatching(),
        closeBrackets(),
        python(),
        syntaxHighlighting(classHighlighter),
        keymap.of([submitKey, ...closeBracketsKeymap, ...defaultKeymap, ...historyKeymap, indentWithTab]),
        EditorView.contentAttributes.of(contentAttributes),
        EditorView.updateListener.of((update) => {
          if (!update.docChanged) return;
          textarea.value = update.state.doc.toString();
          if (onChange) onChange(textarea.value);
        }),
      ],
    }),
  });
  textarea.after(view.dom);
  textarea.hidden = true;
  return {
    view,
    getCode: () => view.state.doc.toString(),
    setCode(code) {
      view.dispatch({ changes: { from: 0, to: view.state.doc.length, insert: code } });
    },
    goToLine(number) {
      const line = view.state.doc.line(Math.min(Math.max(1, number), view.state.doc.lines));
      view.dispatch({
        selection: EditorSelection.cursor(line.from),
        effects: EditorView.scrollIntoView(line.from, { y: "center" }),
      });
      view.focus();
    },
    focus: () => view.focus(),
    destroy() {
      view.destroy();
      textarea.hidden = false;
    },
  };
}
