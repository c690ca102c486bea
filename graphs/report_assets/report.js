// kernelforge run report: inlined into report.html; vanilla JS, no library, no network.
(function () {
  "use strict";

  // A link into a folded section (a plot point, "details ↓") must unfold every <details> around it.
  function reveal(id) {
    var target = document.getElementById(id);
    if (!target) return;
    for (var el = target; el; el = el.parentElement) {
      if (el.tagName === "DETAILS") el.open = true;
    }
    target.scrollIntoView({ block: "start" });
  }

  function setTree(open) {
    document.querySelectorAll("#tree details.node").forEach(function (d) { d.open = open; });
  }

  document.getElementById("expand-all").addEventListener("click", function () { setTree(true); });
  document.getElementById("collapse-all").addEventListener("click", function () { setTree(false); });

  document.querySelectorAll("#speedup-plot .pt").forEach(function (pt) {
    pt.addEventListener("click", function () {
      var id = "cand-" + pt.getAttribute("data-cid");
      reveal(id);
    });
  });

  // hashchange does not fire when the same link is followed twice, so in-page links reveal directly too
  document.addEventListener("click", function (event) {
    var link = event.target.closest ? event.target.closest('a[href^="#"]') : null;
    if (link) reveal(decodeURIComponent(link.getAttribute("href").slice(1)));
  });

  window.addEventListener("hashchange", function () { reveal(decodeURIComponent(location.hash.slice(1))); });
  if (location.hash) reveal(decodeURIComponent(location.hash.slice(1)));
})();
