// Partial updates: an element with data-refresh="URL" and data-every="ms"
// has its content replaced by the HTML fragment at URL, until the server
// answers with the header X-Console-Done. The fragments are rendered and
// escaped by the server, like the pages.
(function () {
  "use strict";
  function refresh(el) {
    var every = parseInt(el.getAttribute("data-every"), 10) || 15000;
    var url = el.getAttribute("data-refresh");
    function tick() {
      fetch(url, { credentials: "same-origin", headers: { "X-Console-Fragment": "1" } }).then(function (resp) {
        if (resp.status === 401) { window.location.href = "/console/login"; return; }
        if (!resp.ok) { setTimeout(tick, every); return; }
        var done = resp.headers.get("X-Console-Done") === "1";
        return resp.text().then(function (html) {
          el.innerHTML = html;
          if (!done) { setTimeout(tick, every); }
        });
      }).catch(function () { setTimeout(tick, every); });
    }
    if (el.getAttribute("data-now") === "1") { tick(); } else { setTimeout(tick, every); }
  }
  document.addEventListener("DOMContentLoaded", function () {
    document.querySelectorAll("[data-refresh]").forEach(refresh);
  });
})();
