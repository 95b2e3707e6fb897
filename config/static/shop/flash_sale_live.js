// The live flash-sale page (config/templates/admin/flash_sale_live.html): refreshes its
// figures in place every 3 s from the page's JSON twin. A file of its own, not an inline
// script, so that the admin's Content-Security-Policy allows scripts from 'self' only.
(function () {
  const box = document.getElementById("flash-sale");
  const names = ["at", "window", "gate_remaining", "available", "reserved", "units_ordered", "orders_last_minute",
                 "refused_sold_out", "refused_limit_reached", "refused_rate_limited", "queue_depth", "queue_stale"];
  async function refresh() {
    try {
      const response = await fetch(box.dataset.url, {credentials: "same-origin"});
      if (!response.ok) return;
      const sale = await response.json();
      for (const name of names) {
        document.getElementById(name).textContent = sale[name] === null ? "-" : sale[name];
      }
    } catch (error) { /* the next tick tries again */ }
  }
  setInterval(refresh, 3000);
})();
