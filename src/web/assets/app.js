// kbdb web page: search as you type (the server renders the results; this only fetches them).
"use strict";
(function () {
  var form = document.getElementById("search-form");
  var input = document.getElementById("q");
  var results = document.getElementById("results");
  if (!form || !input || !results) return;
  var timer = null;
  var seq = 0;
  function run() {
    var params = new URLSearchParams(new FormData(form));
    if (!params.get("q")) return;
    var mine = ++seq;
    params.set("fragment", "1");
    fetch("/search?" + params.toString(), { credentials: "same-origin" })
      .then(function (r) { return r.ok ? r.text() : null; })
      .then(function (html) {
        if (html === null || mine !== seq) return;
        results.innerHTML = html; // server-rendered, sanitised HTML
        params.delete("fragment");
        history.replaceState(null, "", "/search?" + params.toString());
      })
      .catch(function () {});
  }
  input.addEventListener("input", function () {
    clearTimeout(timer);
    timer = setTimeout(run, 250);
  });
})();
