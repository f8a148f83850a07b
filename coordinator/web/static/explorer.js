// The explorer's one script: a page's audit (the SDK's chain-only audit, which reads every
// transaction of the account from the chain) loads after the page itself, so the page paints at
// once however long the history. Without JavaScript the section's link opens the audit's own page.
for (const section of document.querySelectorAll("[data-audit-src]")) {
  fetch(section.dataset.auditSrc, { headers: { Accept: "text/html" } })
    .then((response) => response.text())
    .then((html) => {
      const found = new DOMParser().parseFromString(html, "text/html").querySelector("[data-audit]");
      if (found) section.replaceWith(document.importNode(found, true));
      else section.querySelector("[data-audit-status]").textContent = "The audit could not be loaded.";
    })
    .catch((error) => {
      section.querySelector("[data-audit-status]").textContent = `The audit could not be loaded: ${error}`;
    });
}
