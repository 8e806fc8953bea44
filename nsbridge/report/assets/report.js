(function () {
  "use strict";
  var data = JSON.parse(document.getElementById("nsbridge-data").textContent);
  var palette = ["#2563eb", "#f59e0b", "#10b981", "#ef4444", "#8b5cf6", "#6b7280"];
  function chart(id, config) {
    var canvas = document.getElementById(id);
    if (!canvas || typeof Chart === "undefined") { return; }
    config.options = Object.assign({animation: false, maintainAspectRatio: false,
                                     responsive: true}, config.options || {});
    new Chart(canvas, config);
  }
  function sets(series, stack) {
    return Object.keys(series).map(function (name, i) {
      return {label: name, data: series[name], backgroundColor: palette[i % palette.length],
              stack: stack ? "s" : undefined};
    });
  }
  if (data.steps) {
    chart("chart-steps", {type: "bar", data: {labels: data.steps.labels,
      datasets: sets(data.steps.phases, true)},
      options: {scales: {x: {stacked: true, title: {display: true, text: "step"}},
                         y: {stacked: true, title: {display: true, text: "ms"}}}}});
  }
  if (data.ops) {
    chart("chart-ops", {type: "bar", data: {labels: data.ops.labels,
      datasets: sets(data.ops.series, false)},
      options: {indexAxis: "y", scales: {x: {title: {display: true, text: "ms"}}}}});
  }
  if (data.gaps) {
    chart("chart-gaps", {type: "bar", data: {labels: data.gaps.labels,
      datasets: [{label: "GPU idle (busy " + data.gaps.busy_pct.toFixed(1) + "% of the window)",
                  data: data.gaps.spans, backgroundColor: "#ef4444"}]},
      options: {indexAxis: "y", scales: {x: {min: 0, max: data.gaps.window_ms || undefined,
                title: {display: true, text: "ms from the window's start"}}}}});
  }
  if (data.memory) {
    chart("chart-memory", {type: "bar", data: {labels: data.memory.labels,
      datasets: sets({"gross MiB": data.memory.gross, "net MiB": data.memory.net}, false)},
      options: {indexAxis: "y"}});
  }
  if (data.ncu) {
    chart("chart-ncu", {type: "bar", data: {labels: data.ncu.labels,
      datasets: sets(data.ncu.series, false)},
      options: {indexAxis: "y", scales: {x: {min: 0, max: 100}}}});
  }

  if (data.roofline) {
    var xs = data.roofline.points.map(function (p) { return p.x; });
    var lo = Math.min.apply(null, xs) / 10, hi = Math.max.apply(null, xs) * 10;
    var roofSets = data.roofline.roofs.map(function (r, i) {
      var ridge = r.peak / r.dram;
      var line = [{x: Math.min(lo, ridge / 10), y: Math.min(lo, ridge / 10) * r.dram},
                  {x: ridge, y: r.peak}, {x: Math.max(hi, ridge * 10), y: r.peak}];
      return {type: "line", label: r.label, data: line, borderColor: palette[(i + 3) % palette.length],
              pointRadius: 0, fill: false};
    });
    var pointSets = data.roofline.points.map(function (p, i) {
      return {type: "scatter", label: p.label, data: [{x: p.x, y: p.y}],
              backgroundColor: palette[i % palette.length], pointRadius: 6};
    });
    chart("chart-roofline", {type: "scatter", data: {datasets: roofSets.concat(pointSets)},
      options: {scales: {x: {type: "logarithmic", title: {display: true, text: "FLOP/byte (DRAM)"}},
                         y: {type: "logarithmic", title: {display: true, text: "FLOP/s"},
                             ticks: {callback: function (v) {
                               var units = [[1e15, "P"], [1e12, "T"], [1e9, "G"], [1e6, "M"]];
                               for (var i = 0; i < units.length; i++) {
                                 if (v >= units[i][0]) { return (v / units[i][0]) + " " + units[i][1]; }
                               }
                               return v;
                             }}}}}});
  }

  var table = document.getElementById("op-table");
  if (!table) { return; }
  var body = table.tBodies[0];
  var heads = table.querySelectorAll("th[data-col]");
  function key(row, col) {
    var cell = row.cells[col];
    if (col === 0) { return row.getAttribute("data-name"); }
    var v = cell.getAttribute("data-v");
    var n = parseFloat(v);
    return isNaN(n) ? null : n;
  }
  heads.forEach(function (th) {
    th.addEventListener("click", function () {
      var col = parseInt(th.getAttribute("data-col"), 10);
      var ascending = th.getAttribute("aria-sort") !== "ascending";
      heads.forEach(function (h) { h.removeAttribute("aria-sort"); });
      th.setAttribute("aria-sort", ascending ? "ascending" : "descending");
      var rows = Array.prototype.slice.call(body.rows);
      rows.sort(function (a, b) {
        var x = key(a, col), y = key(b, col);
        if (x === null && y === null) { return 0; }
        if (x === null) { return 1; }
        if (y === null) { return -1; }
        var order = x < y ? -1 : x > y ? 1 : 0;
        return ascending ? order : -order;
      });
      rows.forEach(function (r) { body.appendChild(r); });
    });
  });
  var filter = document.getElementById("op-filter");
  var count = document.getElementById("op-count");
  filter.addEventListener("input", function () {
    var q = filter.value.toLowerCase(), shown = 0;
    Array.prototype.forEach.call(body.rows, function (r) {
      var hit = r.getAttribute("data-name").toLowerCase().indexOf(q) >= 0;
      r.style.display = hit ? "" : "none";
      if (hit) { shown += 1; }
    });
    count.textContent = shown + " of " + body.rows.length + " ops";
  });
})();
