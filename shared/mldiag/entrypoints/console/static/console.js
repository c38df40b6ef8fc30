// The console's one script: a run's sessions table refreshes itself while captures or analyses are under way.
// Without it the pages work the same (reload to see progress).
"use strict";

const REFRESH_MS = 2000;

function announce(text) {
  const status = document.getElementById("sessions-status");
  if (status && status.textContent !== text) status.textContent = text;
}

async function refresh(holder) {
  const table = holder.querySelector("[data-refresh]");
  if (!table) return;
  // Leave the table alone while the keyboard is in it (replacing it would drop the focus) or the tab is hidden.
  if (table.dataset.active === "true" && !document.hidden && !table.contains(document.activeElement)) {
    try {
      const response = await fetch(table.dataset.refresh, { credentials: "same-origin", headers: { Accept: "text/html" } });
      if (response.ok) {
        const parsed = new DOMParser().parseFromString(await response.text(), "text/html");
        const fresh = parsed.getElementById("sessions-table");
        if (fresh) {
          table.replaceWith(document.adoptNode(fresh));
          announce(fresh.dataset.summary);
        }
      }
    } catch (error) {
      // The server restarting or the network dropping: try again on the next tick.
    }
  }
  const current = holder.querySelector("[data-refresh]");
  if (current && current.dataset.active === "true") setTimeout(() => refresh(holder), REFRESH_MS);
}

document.addEventListener("DOMContentLoaded", () => {
  const holder = document.getElementById("sessions");
  if (holder) setTimeout(() => refresh(holder), REFRESH_MS);
  const share = document.getElementById("share-url");
  if (share) share.addEventListener("focus", () => share.select());
});
