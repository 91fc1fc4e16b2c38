// leasehold console: live updates over EventSource (the API's SSE streams), no polling loops.
// Every tenant-written string goes into the page through textContent, never innerHTML.
"use strict";

(function () {
  function $(sel, root) { return (root || document).querySelector(sel); }
  function $all(sel, root) { return Array.prototype.slice.call((root || document).querySelectorAll(sel)); }

  var TERMINAL = { completed: 1, failed: 1, cancelled: 1, expired: 1 };

  function setBadge(el, status) {
    if (!el) return;
    el.textContent = status;
    el.className = el.className.replace(/\bs-[a-z_]+/g, "").trim() + " s-" + status;
  }

  function eta(seconds) {
    if (seconds === null || seconds === undefined) return "";
    var s = Math.max(0, Math.round(seconds));
    return s >= 60 ? Math.floor(s / 60) + "m " + String(s % 60).padStart(2, "0") + "s" : s + "s";
  }

  // Videos: the submit form's size list follows the chosen model.
  function modelSizes() {
    var model = $("#model"), size = $("#size");
    if (!model || !size) return;
    model.addEventListener("change", function () {
      var opt = model.options[model.selectedIndex];
      var sizes = (opt && opt.dataset.sizes || "").split(",").filter(Boolean);
      var current = size.value;
      while (size.firstChild) size.removeChild(size.firstChild);
      sizes.forEach(function (s) {
        var o = document.createElement("option");
        o.value = s; o.textContent = s; o.selected = s === current;
        size.appendChild(o);
      });
    });
  }

  // Videos: a job's page follows its video.updated events until the job ends.
  function videoPage() {
    var box = $("#video");
    if (!box) return;
    var id = box.dataset.video;
    var preview = $("#preview"), previewBox = $("#preview-box"), lastPreview = 0;
    // The newest preview frame, fetched once when the job is first seen generating and then on
    // each video.preview event (an API without previews answers 404 and the box stays hidden).
    function showPreview() {
      lastPreview = Date.now();
      preview.src = preview.dataset.src + "&t=" + lastPreview;
    }
    if (preview) {
      preview.addEventListener("load", function () {
        previewBox.hidden = box.dataset.status === "completed";
        box.dataset.previewShown = "1";
      });
      // No preview for this job (yet, or this API has none): the page simply shows none.
      preview.addEventListener("error", function () { previewBox.hidden = true; });
    }
    function show(v) {
      setBadge($("#status"), v.status);
      $("#attempt").textContent = String(v.attempt || 0);
      $("#progress").value = v.progress;
      $("#progress").textContent = v.progress + " %";
      $("#progress-text").textContent = v.progress + " %";
      $("#eta").textContent = v.eta_seconds !== null && v.eta_seconds !== undefined
        ? "ETA " + eta(v.eta_seconds) : (v.eta_reason || "");
      var q = v.queue;
      $("#queue").textContent = q ? "Position " + q.position + " (" + q.ahead + " ahead, " + q.workers_serving +
        " workers serving): " + q.reason : "";
      var err = $("#error");
      err.hidden = !v.error;
      err.textContent = v.error ? v.error.code + ": " + v.error.message : "";
      if (v.status === "in_progress" && preview && !lastPreview) showPreview();
      if (v.status === "completed") {
        var player = $("#player");
        if (!player.getAttribute("src")) {
          player.poster = player.dataset.poster;
          player.src = player.dataset.src;
        }
        $("#player-box").hidden = false;
        if (previewBox) previewBox.hidden = true;
      }
      if (TERMINAL[v.status]) { var c = $("#cancel-form"); if (c) c.hidden = true; }
      box.dataset.status = v.status;
    }
    if (box.dataset.terminal === "1") return;
    var source = new EventSource("/console/videos/" + encodeURIComponent(id) + "/events");
    source.addEventListener("video.updated", function (e) {
      var v = JSON.parse(e.data);
      show(v);
      if (TERMINAL[v.status]) source.close();
    });
    source.addEventListener("video.preview", function () {
      if (preview && box.dataset.status !== "completed") showPreview();
    });
    source.addEventListener("error", function (e) {
      // A named "error" event from the server (the job vanished) carries data; a dropped
      // connection does not, and EventSource reconnects with Last-Event-ID by itself.
      if (e.data) source.close();
    });
  }

  // Videos list: a few open jobs' rows follow their events.
  function videoList() {
    $all("#video-list [data-live]").forEach(function (row) {
      var source = new EventSource("/console/videos/" + encodeURIComponent(row.dataset.video) + "/events");
      source.addEventListener("video.updated", function (e) {
        var v = JSON.parse(e.data);
        setBadge($("[data-field=status]", row), v.status);
        $("[data-field=progress]", row).value = v.progress;
        if (TERMINAL[v.status]) source.close();
      });
      source.addEventListener("error", function (e) { if (e.data) source.close(); });
    });
  }

  // CI run: the graph's nodes and the job list follow run.updated events.
  function runPage() {
    var box = $("#run");
    if (!box || box.dataset.final === "1") return;
    // Statuses whose buttons (approve, reject, retry) the server renders: a change into or out
    // of one reloads the page once, so the right forms (with their tokens) are there.
    var ACTIONS = { awaiting_approval: 1, failure: 1, cancelled: 1 };
    var shown = {};
    $all("#jobs [data-job]").forEach(function (row) {
      shown[row.dataset.job] = $("[data-field=status]", row).textContent;
    });
    var source = new EventSource("/console/runs/" + encodeURIComponent(box.dataset.run) + "/events");
    source.addEventListener("run.updated", function (e) {
      var run = JSON.parse(e.data), reload = false;
      setBadge($("#run-status"), run.status);
      run.jobs.forEach(function (j) {
        var before = shown[j.id];
        if (before !== undefined && before !== j.status && (ACTIONS[before] || ACTIONS[j.status])) reload = true;
        // A job the page does not have (a matrix job's combinations, listed once it is ready):
        // the server draws the graph, so the page is drawn again with it.
        if (before === undefined) reload = true;
        shown[j.id] = j.status;
        $all('[data-job="' + CSS.escape(j.id) + '"]').forEach(function (el) {
          var status = $("[data-field=status]", el);
          if (status) status.textContent = j.status;
          if (el.classList.contains("node")) {
            el.setAttribute("class", "node s-" + j.status);
          } else {
            setBadge(status, j.status);
          }
        });
      });
      box.dataset.status = run.status;
      if (reload) { source.close(); window.location.reload(); }
    });
    source.addEventListener("end", function () {
      source.close();
      var c = $("#cancel-run"); if (c) c.hidden = true;
      box.dataset.final = "1";
      window.location.reload();
    });
  }

  // CI job: the live log. ANSI SGR colours become classes, ::group:: folds, each line links.
  var ANSI = /\x1b\[([0-9;]*)m/g;

  function appendAnsi(parent, text, style) {
    var last = 0, m;
    ANSI.lastIndex = 0;
    function push(s) {
      if (!s) return;
      var span = document.createElement("span");
      span.textContent = s;
      var cls = [];
      if (style.fg !== null) cls.push("ansi-fg-" + style.fg);
      if (style.bg !== null) cls.push("ansi-bg-" + style.bg);
      if (style.bold) cls.push("ansi-bold");
      if (cls.length) span.className = cls.join(" ");
      parent.appendChild(span);
    }
    while ((m = ANSI.exec(text)) !== null) {
      push(text.slice(last, m.index));
      last = ANSI.lastIndex;
      (m[1] || "0").split(";").forEach(function (p) {
        var n = parseInt(p || "0", 10);
        if (n === 0) { style.fg = null; style.bg = null; style.bold = false; }
        else if (n === 1) style.bold = true;
        else if (n === 22) style.bold = false;
        else if (n >= 30 && n <= 37) style.fg = n - 30;
        else if (n >= 90 && n <= 97) style.fg = n - 90 + 8;
        else if (n === 39) style.fg = null;
        else if (n >= 40 && n <= 47) style.bg = n - 40;
        else if (n === 49) style.bg = null;
      });
    }
    push(text.slice(last));
    // Other escape sequences (cursor moves) are dropped rather than shown as noise.
  }

  // The job's steps: the worker's "[leasehold] step N: name" line opens step N, folded in the
  // log under its name and listed as in progress until the next one (or its failure line);
  // the server's list, with every step's status, start and duration, replaces it at the end.
  function stepRow(steps, n, name) {
    var row = $('[data-step="' + n + '"]', steps);
    if (row) return row;
    row = document.createElement("li");
    row.dataset.step = n;
    row.className = "live";
    var badge = document.createElement("span");
    badge.className = "badge";
    var label = document.createElement("span");
    label.className = "name";
    label.textContent = name;
    row.appendChild(badge);
    row.appendChild(document.createTextNode(" "));
    row.appendChild(label);
    steps.appendChild(row);
    setBadge(badge, "in_progress");
    return row;
  }

  function settle(row, status) {
    if (!row || !row.classList.contains("live")) return;
    var badge = $(".badge", row);
    if (badge && badge.textContent === "in_progress") setBadge(badge, status);
  }

  function logPage() {
    var log = $("#log");
    if (!log || !log.dataset.stream) return;
    var state = $("#log-state");
    var steps = $("#steps");
    var lineNo = 0, pending = "", container = log, style = { fg: null, bg: null, bold: false }, jumped = false;
    var stepBox = log, current = null;

    function fold(title) {
      var details = document.createElement("details");
      var summary = document.createElement("summary");
      summary.textContent = title;
      details.appendChild(summary);
      return details;
    }

    function addLine(text) {
      text = text.replace(/\r$/, "");
      var step = /^\[leasehold\] step ([0-9]+): (.*)$/.exec(text);
      if (step) {
        settle(current, "success");
        stepBox = fold("Step " + step[1] + ": " + step[2]);
        stepBox.className = "step";
        stepBox.open = true;
        stepBox.dataset.step = step[1];
        log.appendChild(stepBox);
        container = stepBox;
        if (steps) current = stepRow(steps, step[1], step[2]);
      }
      var failed = /^\[leasehold\] step ([0-9]+) failed with exit code/.exec(text);
      if (!step && failed && current && current.dataset.step === failed[1]) settle(current, "failure");
      if (/^\[leasehold\] step (timed out|stopped|cancelled)/.test(text)) settle(current, "failure");
      if (/^\[leasehold\] job \S+ finished/.test(text)) {
        settle(current, "success");
        stepBox = container = log;
      }
      var group = /^::group::(.*)$/.exec(text);
      if (group) {
        var details = fold(group[1] || "group");
        stepBox.appendChild(details);
        container = details;
        return;
      }
      if (/^::endgroup::\s*$/.test(text)) { container = stepBox; return; }
      lineNo += 1;
      var line = document.createElement("div");
      line.className = "line";
      line.id = "L" + lineNo;
      var link = document.createElement("a");
      link.href = "#L" + lineNo;
      link.className = "ln";
      link.textContent = String(lineNo);
      link.setAttribute("aria-label", "line " + lineNo);
      var body = document.createElement("span");
      body.className = "txt";
      appendAnsi(body, text, style);
      line.appendChild(link);
      line.appendChild(body);
      container.appendChild(line);
      if (!jumped && window.location.hash === "#L" + lineNo) jumpTo(line);
    }

    function jumpTo(line) {
      jumped = true;
      $all(".line.target", log).forEach(function (el) { el.classList.remove("target"); });
      var d = line.closest("details");
      if (d) d.open = true;
      line.classList.add("target");
      line.scrollIntoView({ block: "center" });
    }

    var raw = [];
    var download = $("#log-download");
    if (download) {
      // The log as this page received it (all of it once the attempt has ended), as a file.
      download.addEventListener("click", function (e) {
        e.preventDefault();
        var a = document.createElement("a");
        a.href = URL.createObjectURL(new Blob([raw.join("")], { type: "text/plain" }));
        a.download = download.dataset.name;
        document.body.appendChild(a);
        a.click();
        a.remove();
      });
    }

    function addText(text) {
      raw.push(text);
      var parts = (pending + text).split("\n");
      pending = parts.pop();
      parts.forEach(addLine);
    }

    function gap(seq) {
      var g = document.createElement("div");
      g.className = "gap";
      g.textContent = "[output lost: chunk " + seq + " could not be stored]";
      container.appendChild(g);
    }

    // Search: the lines holding the text are marked and their folds opened; Enter goes to
    // the next one.
    var search = $("#log-search"), hits = $("#log-hits"), found = [], at = -1;
    function runSearch() {
      var q = search.value.toLowerCase();
      found = [];
      at = -1;
      $all(".line", log).forEach(function (line) {
        var hit = q !== "" && line.textContent.toLowerCase().indexOf(q) >= 0;
        line.classList.toggle("hit", hit);
        if (hit) {
          found.push(line);
          var d = line.closest("details");
          while (d) { d.open = true; d = d.parentElement && d.parentElement.closest("details"); }
        }
      });
      hits.textContent = q === "" ? "" : found.length + (found.length === 1 ? " match" : " matches");
    }
    if (search) {
      search.addEventListener("input", runSearch);
      search.addEventListener("keydown", function (e) {
        if (e.key !== "Enter" || !found.length) return;
        e.preventDefault();
        at = (at + 1) % found.length;
        jumpTo(found[at]);
      });
    }

    window.addEventListener("hashchange", function () {
      var line = /^#L[0-9]+$/.test(window.location.hash) && document.getElementById(window.location.hash.slice(1));
      if (line) jumpTo(line);
    });

    var source = new EventSource(log.dataset.stream);
    source.addEventListener("open", function () { state.textContent = "live"; });
    source.addEventListener("log", function (e) {
      var d = JSON.parse(e.data);
      addText(d.text);
      log.dataset.nextSeq = String(d.seq + 1);
    });
    source.addEventListener("gap", function (e) { gap(JSON.parse(e.data).seq); });
    source.addEventListener("end", function (e) {
      var d = JSON.parse(e.data);
      if (pending) { addLine(pending); pending = ""; }
      source.close();
      state.textContent = "ended: " + d.status;
      log.dataset.ended = "1";
      var badge = $("#job-status");
      if (badge && d.status) setBadge(badge, d.status);
      refreshSteps(steps);
    });
    source.addEventListener("error", function (e) {
      if (e.data) { source.close(); state.textContent = "stream closed"; return; }
      // Dropped: EventSource reconnects and sends Last-Event-ID (the last seq), so the stream
      // resumes after the last line shown.
      if (log.dataset.ended !== "1") state.textContent = "reconnecting…";
    });
  }

  // The page as the server renders it now: its step list has every step's final state once the
  // attempt's result is recorded (a moment after its log ends), so it asks a few times.
  function refreshSteps(steps, tries) {
    if (!steps || !window.fetch) return;
    tries = tries === undefined ? 20 : tries;
    fetch(window.location.pathname + window.location.search, { credentials: "same-origin" })
      .then(function (r) { return r.ok ? r.text() : null; })
      .then(function (html) {
        var fresh = html && new DOMParser().parseFromString(html, "text/html").getElementById("steps");
        if (fresh && fresh.children.length) {
          steps.replaceChildren.apply(steps, Array.prototype.slice.call(fresh.children));
          steps.dataset.final = "1";
        } else if (tries > 1) {
          setTimeout(function () { refreshSteps(steps, tries - 1); }, 1000);
        }
      })
      .catch(function () { /* the live list stays */ });
  }

  document.addEventListener("DOMContentLoaded", function () {
    modelSizes();
    videoPage();
    videoList();
    runPage();
    logPage();
  });
})();
