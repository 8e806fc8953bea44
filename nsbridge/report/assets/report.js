(function () {
  "use strict";
  var data = JSON.parse(document.getElementById("nsbridge-data").textContent);
  var palette = ["#2563eb", "#f59e0b", "#10b981", "#ef4444", "#8b5cf6", "#6b7280"];
  function middleCut(label, most) {   // at most `most` characters, the middle as "…"
    if (label.length <= most) { return label; }
    var head = Math.floor((most - 1) * 0.45);
    return label.slice(0, head) + "\u2026" + label.slice(label.length - (most - 1 - head));
  }
  function chart(id, config) {
    var canvas = document.getElementById(id);
    if (!canvas || typeof Chart === "undefined") { return; }
    config.options = Object.assign({animation: false, maintainAspectRatio: false,
                                     responsive: true}, config.options || {});
    if (config.options.indexAxis === "y") {   // long names: cut in the middle, full in the tooltip
      var scales = config.options.scales = config.options.scales || {};
      scales.y = Object.assign({ticks: {autoSkip: false, callback: function (v) {
        // Chart.js gives the y axis at most half the chart's width: cut to what fits there
        var label = String(this.getLabelForValue(v));
        var ctx = this.ctx, room = this.chart.width / 2 - 16, most = Math.min(44, label.length);
        ctx.save();
        ctx.font = Chart.helpers.toFont(this.options.ticks.font).string;
        var text = middleCut(label, most);
        while (most > 12 && ctx.measureText(text).width > room) { text = middleCut(label, --most); }
        ctx.restore();
        return text;
      }}}, scales.y || {});
    }
    new Chart(canvas, config);
  }
  function sets(series, stack) {
    return Object.keys(series).map(function (name, i) {
      return {label: name, data: series[name], backgroundColor: palette[i % palette.length],
              stack: stack ? "s" : undefined};
    });
  }
  if (data.ranks) {
    var rankSets = sets(data.ranks.series, true).map(function (set) {
      set.borderColor = "#b91c1c";
      set.borderWidth = data.ranks.straggler.map(function (s) { return s ? 3 : 0; });
      return set;
    });
    chart("chart-ranks", {type: "bar", data: {labels: data.ranks.labels, datasets: rankSets},
      options: {scales: {x: {stacked: true}, y: {stacked: true, title: {display: true, text: "ms per step"}}}}});
  }
  if (data.rank_steps) {
    chart("chart-rank_steps", {type: "bar", data: {labels: data.rank_steps.labels,
      datasets: [{label: "ranks", data: data.rank_steps.counts, backgroundColor:
        data.rank_steps.straggler.map(function (s) { return s ? "#b91c1c" : palette[0]; })}]},
      options: {scales: {x: {title: {display: true, text: "median step (ms)"}},
                         // log: one slow rank stays visible beside thousands
                         y: {type: "logarithmic", min: 0.5,
                             title: {display: true, text: "ranks (log scale)"}}}}});
  }
  if (data.rank_heat) {   // a table, each cell shaded by where it lies in its op's range
    var canvas = document.getElementById("chart-rank_heat");
    var heat = data.rank_heat, table = document.createElement("table");
    table.className = "heat";
    var head = table.insertRow();
    head.insertCell().textContent = "op";
    heat.columns.forEach(function (c) { head.insertCell().textContent = c; });
    heat.ops.forEach(function (op, i) {
      var row = table.insertRow(), values = heat.us[i];
      var low = Math.min.apply(null, values), span = Math.max.apply(null, values) - low;
      row.insertCell().textContent = op;
      values.forEach(function (v) {
        var cell = row.insertCell();
        cell.textContent = v.toFixed(0);
        var shade = span > 0 ? (v - low) / span : 0;
        cell.style.background = "rgba(185, 28, 28, " + shade.toFixed(2) + ")";
      });
    });
    if (canvas) { canvas.replaceWith(table); }
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
  if (data.kernels) {
    chart("chart-kernels", {type: "bar", data: {labels: data.kernels.labels,
      datasets: sets(data.kernels.series, false)},
      options: {indexAxis: "y", scales: {x: {title: {display: true, text: "ms"}}}}});
  }
  if (data.gaps) {
    chart("chart-gaps", {type: "bar", data: {labels: data.gaps.labels,
      datasets: [{label: "GPU idle (busy " + data.gaps.busy_pct.toFixed(1) + "% of the window)",
                  data: data.gaps.spans, backgroundColor: "#ef4444"}]},
      options: {indexAxis: "y", scales: {x: {min: 0, max: data.gaps.window_ms || undefined,
                title: {display: true, text: "ms from the window's start"}}}}});
  }
  if (data.memory_curve) {
    var mc = data.memory_curve;
    var curves = [{type: "line", label: "allocated MiB (" + mc.device + ")", data: mc.allocated,
                   borderColor: palette[0], pointRadius: 0, stepped: true, fill: false}];
    if (mc.reserved) {
      curves.push({type: "line", label: "reserved MiB", data: mc.reserved,
                   borderColor: palette[5], pointRadius: 0, stepped: true, fill: false});
    }
    curves.push({type: "scatter", label: mc.peak.label, data: [{x: mc.peak.x, y: mc.peak.y}],
                 backgroundColor: palette[3], pointRadius: 6});
    chart("chart-memory_curve", {type: "scatter", data: {datasets: curves},
      options: {scales: {x: {type: "linear", title: {display: true, text: "ms from the window's start"}},
                         y: {title: {display: true, text: "MiB"}}}}});
  }
  if (data.memory) {
    chart("chart-memory", {type: "bar", data: {labels: data.memory.labels,
      datasets: sets({"gross MiB": data.memory.gross, "net MiB": data.memory.net}, false)},
      options: {indexAxis: "y"}});
  }
  function roofline(id, r) {
    var xs = r.points.map(function (p) { return p.x; });
    var lo = Math.min.apply(null, xs) / 10, hi = Math.max.apply(null, xs) * 10;
    var roofSets = r.roofs.map(function (roof, i) {
      var ridge = roof.peak / roof.dram;
      var line = [{x: Math.min(lo, ridge / 10), y: Math.min(lo, ridge / 10) * roof.dram},
                  {x: ridge, y: roof.peak}, {x: Math.max(hi, ridge * 10), y: roof.peak}];
      return {type: "line", label: roof.label, data: line, borderColor: palette[(i + 3) % palette.length],
              pointRadius: 0, fill: false};
    });
    var pointSets = r.points.map(function (p, i) {
      return {type: "scatter", label: p.label, data: [{x: p.x, y: p.y}],
              backgroundColor: palette[i % palette.length], pointRadius: 6};
    });
    chart(id, {type: "scatter", data: {datasets: roofSets.concat(pointSets)},
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

  // each pass's own charts, as its view declares them (report/document/pass_view.py)
  (data.pass_charts || []).forEach(function (c) {
    var id = "chart-pass-" + c.id;
    if (c.kind === "roofline") { roofline(id, c); return; }
    var x = Object.assign({}, c.range || {});
    if (c.unit) { x.title = {display: true, text: c.unit}; }
    chart(id, {type: "bar", data: {labels: c.labels, datasets: sets(c.series, false)},
      options: {indexAxis: "y", scales: {x: x}}});
  });

  function sortable(table) {
    var body = table.tBodies[0];
    var heads = table.querySelectorAll("th[data-col]");
    function key(row, col) {
      if (col === 0) { return row.getAttribute("data-name"); }
      var v = row.cells[col].getAttribute("data-v");
      if (v === null || v === "") { return null; }
      var n = parseFloat(v);
      return isNaN(n) ? v : n;
    }
    heads.forEach(function (th) {
      th.addEventListener("click", function () {
        var col = parseInt(th.getAttribute("data-col"), 10);
        var numeric = th.getAttribute("data-numeric") === "1";
        var current = th.getAttribute("aria-sort");
        // numbers: largest first on the first click; names: A to Z
        var ascending = current ? current !== "ascending" : !numeric;
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
  }
  document.querySelectorAll("table.sortable").forEach(sortable);
  document.querySelectorAll("input.row-filter").forEach(function (filter) {
    var table = document.getElementById(filter.getAttribute("data-table"));
    var count = document.querySelector(".row-count[data-table='" + table.id + "']");
    filter.addEventListener("input", function () {
      var q = filter.value.toLowerCase(), shown = 0, rows = table.tBodies[0].rows;
      Array.prototype.forEach.call(rows, function (r) {
        var hit = r.getAttribute("data-name").toLowerCase().indexOf(q) >= 0;
        r.style.display = hit ? "" : "none";
        if (hit) { shown += 1; }
      });
      count.textContent = shown + " of " + rows.length + " rows";
    });
  });
  document.querySelectorAll(".toggle-bar").forEach(function (bar) {
    var section = bar.parentNode;
    bar.querySelectorAll("button[data-show]").forEach(function (button) {
      button.addEventListener("click", function () {
        var wanted = button.getAttribute("data-show");
        section.querySelectorAll("div.toggled").forEach(function (div) {
          div.hidden = div.getAttribute("data-toggle") !== wanted;
        });
        bar.querySelectorAll("button[data-show]").forEach(function (b) {
          b.setAttribute("aria-pressed", b === button ? "true" : "false");
        });
      });
    });
  });
})();
