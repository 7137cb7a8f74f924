// Search excerpts, on the search page: Sphinx shows the text of a result page around the first
// match. Leave out what the index leaves out (cells marked "no-search": plotting code) and show
// each formula as readable text (√d_k, α·β, Q K⊤) instead of its raw LaTeX.
(function () {
  if (typeof Search === "undefined" || !Search.htmlToText) {
    return;
  }
  var symbols = {
    alpha: "α", beta: "β", gamma: "γ", delta: "δ", epsilon: "ε", eta: "η", theta: "θ",
    lambda: "λ", mu: "μ", pi: "π", sigma: "σ", tau: "τ", phi: "φ", psi: "ψ", omega: "ω",
    Phi: "Φ", Sigma: "Σ", Omega: "Ω", sum: "Σ", prod: "Π", sqrt: "√", top: "⊤", cdot: "·",
    cdots: "⋯", dots: "…", ldots: "…", vdots: "⋮", times: "×", approx: "≈", le: "≤", leq: "≤",
    ge: "≥", geq: "≥", ne: "≠", neq: "≠", to: "→", rightarrow: "→", leftarrow: "←", in: "∈",
    infty: "∞", partial: "∂", odot: "⊙", pm: "±", propto: "∝", ell: "ℓ", mid: "|", ll: "≪",
    gg: "≫", lVert: "‖", rVert: "‖", lceil: "⌈", rceil: "⌉",
  };
  function readable(tex) {
    return tex
      .replace(/^\s*\\[(\[]|\\[)\]]\s*$/g, "")
      .replace(/\\(begin|end)\{[^}]*\}/g, " ")
      .replace(/\\([A-Za-z]+)/g, function (match, name) {
        // a known symbol; a letter-like command (\mathrm, \text, \frac, \left) goes
        return symbols[name] || "";
      })
      .replace(/\\[,;:! ]|&|\\\\/g, " ")
      .replace(/[{}]/g, "")
      .replace(/\s+/g, " ")
      .trim();
  }
  var htmlToText = Search.htmlToText;
  Search.htmlToText = function (htmlString, anchor) {
    var doc = new DOMParser().parseFromString(htmlString, "text/html");
    doc.querySelectorAll(".no-search").forEach(function (el) { el.remove(); });
    doc.querySelectorAll(".math").forEach(function (el) {
      el.textContent = " " + readable(el.textContent) + " ";
    });
    return htmlToText(doc.documentElement.outerHTML, anchor);
  };
})();
