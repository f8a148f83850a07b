// The settlements feed, live: each settlement the indexer writes arrives as a server-sent event
// carrying its table row (rendered by the server, as the page's own rows are) and goes on top.
// EventSource reconnects by itself, sending the last id it saw; the server catches it up.
"use strict";
(function () {
  const table = document.querySelector("table[data-live]");
  if (!table || !window.EventSource) return;
  const body = table.tBodies[0];
  const status = document.querySelector("[data-live-status]");
  const source = new EventSource(table.dataset.live);
  source.addEventListener("settlement", function (event) {
    const row = JSON.parse(event.data);
    if (body.querySelector('tr[data-id="' + row.id + '"]')) return;
    body.insertAdjacentHTML("afterbegin", row.html);
    const empty = document.querySelector("[data-empty]");
    if (empty) empty.remove();
  });
  source.addEventListener("reload", function () { window.location.reload(); });
  source.addEventListener("open", function () {
    if (status) status.textContent = "Live: new settlements appear here as they land.";
  });
  source.addEventListener("error", function () {
    if (status) status.textContent = "Live updates interrupted; reconnecting…";
  });
})();
