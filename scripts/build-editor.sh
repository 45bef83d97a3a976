#!/usr/bin/env bash
# Rebuild the vendored editor bundle static/vendor/codemirror/gradlab-editor.js from the pinned
# CodeMirror 6 packages (package.json + package-lock.json next to it) with esbuild.
#
# Only maintainers who change the editor need this (and Node >= 18 with npm): the built file is
# committed, so installing or running gradlab needs no Node. After a rebuild, commit
# gradlab-editor.js together with any change to entry.mjs, package.json or package-lock.json.
set -euo pipefail
cd "$(dirname "$0")/../static/vendor/codemirror"
npm ci --no-audit --no-fund
npm run build
cp node_modules/@codemirror/view/LICENSE LICENSE
echo "built $(pwd)/gradlab-editor.js ($(wc -c < gradlab-editor.js) bytes)"
