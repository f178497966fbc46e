// robustlab review: one image at a time, keyboard first.
// Every action goes through one promise queue, so fast key presses are applied in order
// and each sees the state the previous one left. body[data-pending] counts queued actions.
"use strict";

(function () {
  const config = JSON.parse(document.getElementById("config").textContent);
  const $ = (id) => document.getElementById(id);
  const LABELS = {accept: "Accepted", reject: "Rejected", not_single: "Not a single object",
                  relabel: "Relabelled"};

  let set = null;          // /api/set: items, classes
  let classByKey = {};
  let state = null;        // /api/state: this annotator's decisions
  let index = 0;           // image shown
  let queue = Promise.resolve();
  let pending = 0;
  let choices = [];        // relabel dialog: filtered classes
  let choice = 0;

  function api(path, body) {
    const opts = {headers: {"X-Review-Token": config.token}, cache: "no-store"};
    if (body !== undefined) {
      opts.method = "POST";
      opts.headers["Content-Type"] = "application/json";
      opts.body = JSON.stringify(body);
    }
    return fetch(path, opts).then(async (r) => {
      const data = await r.json().catch(() => ({}));
      if (!r.ok) throw new Error(data.error || `${r.status} ${r.statusText}`);
      return data;
    });
  }

  function enqueue(fn) {
    pending += 1;
    document.body.dataset.pending = String(pending);
    queue = queue.then(fn).catch((e) => toast(e.message, true)).finally(() => {
      pending -= 1;
      document.body.dataset.pending = String(pending);
    });
    return queue;
  }

  function toast(text, bad) {
    const t = $("toast");
    t.textContent = text;
    t.className = "toast show" + (bad ? " bad" : "");
    clearTimeout(toast.timer);
    toast.timer = setTimeout(() => { t.className = "toast"; }, bad ? 6000 : 1800);
  }

  function decisionOf(i) {
    return state && state.decisions[String(i)];
  }

  function nextUndecided(from) {
    const n = set.items.length;
    for (let step = 1; step <= n; step++) {
      const i = (from + step) % n;
      if (!decisionOf(i)) return i;
    }
    return -1;
  }

  function firstUndecided() {
    const i = nextUndecided(set.items.length - 1);
    return i < 0 ? 0 : i;
  }

  function classText(key) {
    const c = classByKey[key];
    return c ? c.name : key;
  }

  function render() {
    const item = set.items[index];
    const n = set.items.length;
    const img = $("image");
    img.classList.remove("upscaled");
    img.src = `/image/${item.index}?token=${encodeURIComponent(config.token)}`;
    img.alt = `${item.id} (labelled ${classText(item.label)})`;
    img.dataset.id = item.id;
    document.body.dataset.index = String(index);
    document.body.dataset.imageId = item.id;
    $("position").textContent = `Image ${index + 1} of ${n}`;
    $("image-id").textContent = item.id;

    const c = classByKey[item.label];
    $("label-name").textContent = c ? c.name : item.label;
    const keys = [item.label].concat(c ? c.wnids.filter((w) => w !== item.label) : []);
    $("label-keys").textContent = keys.join(" · ") + `  (${set.label_space})`;

    const d = decisionOf(index);
    const status = $("status");
    status.dataset.decision = d ? d.decision : "";
    status.textContent = !d ? "not reviewed yet"
      : d.decision === "relabel" ? `Relabelled → ${d.target_name || classText(d.target)} (${d.target})`
      : LABELS[d.decision];

    const list = $("guesses");
    list.replaceChildren();
    if (!item.guesses.length) {
      const li = document.createElement("li");
      li.className = "none";
      li.textContent = "no predictions given";
      list.append(li);
    }
    for (const g of item.guesses) {
      const li = document.createElement("li");
      const who = document.createElement("span");
      who.className = "who";
      who.textContent = g.column;
      const what = document.createElement("span");
      what.className = "what";
      if (g.correct === null) {
        // A column of class keys or wnids: the readable name, with the key when it differs.
        what.textContent = g.name && g.name !== g.value ? `${g.name} (${g.value})` : g.value;
        if (g.value === item.label || (c && c.wnids.includes(g.value))) li.className = "same";
      } else {
        // robustlab mine's hard.csv: the model's predicted class and whether it is right.
        what.textContent = g.name || `class ${g.value}`;
        what.title = `class index ${g.value}`;
        const mark = document.createElement("span");
        mark.className = "mark";
        mark.textContent = g.correct ? "\u2713 right" : "\u2717 wrong";
        what.append(" ", mark);
        li.className = g.correct ? "same" : "wrong";
      }
      li.append(who, what);
      list.append(li);
    }
    const facts = $("details");
    facts.replaceChildren();
    for (const f of item.details) {
      const dt = document.createElement("dt");
      dt.textContent = f.what;
      const dd = document.createElement("dd");
      dd.textContent = f.value;
      facts.append(dt, dd);
    }
    facts.hidden = !item.details.length;
    renderProgress();
    // Warm the cache with the next image so moving on feels instant.
    if (n > 1) new Image().src = `/image/${set.items[(index + 1) % n].index}?token=${encodeURIComponent(config.token)}`;
  }

  function renderProgress() {
    const done = state.reviewed, n = state.n;
    $("progress").textContent = done === n
      ? `All ${n} reviewed by ${state.annotator}`
      : `${done} of ${n} reviewed by ${state.annotator}`;
    $("progress-fill").style.width = `${n ? (100 * done) / n : 0}%`;
    document.body.dataset.reviewed = String(done);
  }

  function go(i) {
    const n = set.items.length;
    index = ((i % n) + n) % n;
    render();
  }

  // The image an action applies to is the one shown when its turn in the queue comes:
  // pressing "a a a" quickly accepts three images in a row, as if pressed slowly.
  function decide(decision, target) {
    return enqueue(async () => {
      const at = index;
      state = await api("/api/decide", {annotator: config.annotator, index: at, decision, target});
      const d = decisionOf(at);
      toast(d.decision === "relabel" ? `Relabelled → ${d.target_name}` : LABELS[d.decision]);
      const next = nextUndecided(at);
      go(next < 0 ? at : next);
      if (next < 0) toast(`All ${set.items.length} images reviewed - thank you`);
    });
  }

  function undo() {
    return enqueue(async () => {
      state = await api("/api/undo", {annotator: config.annotator});
      if (!state.undone) {
        toast("Nothing to undo");
        renderProgress();
        return;
      }
      toast(`Undid: ${LABELS[state.undone.decision]}`);
      if (state.undone.index !== null) go(state.undone.index); else render();
    });
  }

  // ------------------------------------------------------------------ relabel dialog
  function openRelabel() {
    $("relabel").hidden = false;
    const input = $("relabel-search");
    input.value = "";
    filterChoices("");
    input.focus();
  }

  function closeRelabel() {
    $("relabel").hidden = true;
    document.activeElement && document.activeElement.blur();
  }

  function filterChoices(text) {
    const q = text.trim().toLowerCase();
    const label = set.items[index].label;
    choices = set.classes.filter((c) => c.key !== label && (!q
      || c.name.toLowerCase().includes(q) || c.key.toLowerCase().includes(q)
      || c.wnids.some((w) => w.toLowerCase().includes(q))));
    // Names that start with the query first: "cat" should find "cat" before "bobcat".
    if (q) choices.sort((a, b) => (b.name.toLowerCase().startsWith(q) - a.name.toLowerCase().startsWith(q)));
    choice = 0;
    renderChoices();
  }

  function renderChoices() {
    const list = $("relabel-list");
    list.replaceChildren();
    choices.slice(0, 60).forEach((c, i) => {
      const li = document.createElement("li");
      li.setAttribute("role", "option");
      li.dataset.key = c.key;
      if (i === choice) { li.className = "on"; li.setAttribute("aria-selected", "true"); }
      const name = document.createElement("span");
      name.textContent = c.name;
      const key = document.createElement("code");
      key.textContent = [c.key].concat(c.wnids.filter((w) => w !== c.key)).join(" · ");
      li.append(name, key);
      li.addEventListener("mousedown", (e) => { e.preventDefault(); pick(i); });
      list.append(li);
    });
    if (!choices.length) {
      const li = document.createElement("li");
      li.className = "none";
      li.textContent = "no class matches";
      list.append(li);
    }
    const on = list.querySelector(".on");
    if (on) on.scrollIntoView({block: "nearest"});
  }

  function pick(i) {
    const c = choices[i];
    if (!c) return;
    closeRelabel();
    decide("relabel", c.key);
  }

  $("relabel-search").addEventListener("input", (e) => filterChoices(e.target.value));
  $("relabel-search").addEventListener("keydown", (e) => {
    const shown = Math.min(choices.length, 60);
    if (e.key === "ArrowDown") { choice = Math.min(shown - 1, choice + 1); renderChoices(); e.preventDefault(); }
    else if (e.key === "ArrowUp") { choice = Math.max(0, choice - 1); renderChoices(); e.preventDefault(); }
    else if (e.key === "Enter") { pick(choice); e.preventDefault(); }
    else if (e.key === "Escape") { closeRelabel(); e.preventDefault(); }
    e.stopPropagation();
  });
  // A small photo (a 64 px thumbnail, a CIFAR-sized image) is scaled up to fill the pane,
  // with square pixels rather than a blur, so the reviewer sees what the model saw.
  $("image").addEventListener("load", () => {
    const img = $("image");
    const scale = Math.min(img.clientWidth / img.naturalWidth, img.clientHeight / img.naturalHeight);
    // Square pixels only where they show (2x and up); a 10 % enlargement stays smooth.
    img.classList.toggle("upscaled", scale >= 2);
  });
  $("relabel").addEventListener("mousedown", (e) => { if (e.target.id === "relabel") closeRelabel(); });

  // ------------------------------------------------------------------ keyboard and buttons
  const back = () => enqueue(() => go(index - 1));
  const forward = () => enqueue(() => go(index + 1));
  const KEYS = {a: () => decide("accept"), r: () => decide("reject"), n: () => decide("not_single"),
                l: () => enqueue(openRelabel), u: undo, ArrowLeft: back, ArrowRight: forward,
                k: back, j: forward};

  document.addEventListener("keydown", (e) => {
    if (!set || !state || e.ctrlKey || e.metaKey || e.altKey) return;
    if (e.target.closest && e.target.closest("input, textarea, select")) return;
    if (!$("relabel").hidden || !$("ask-name").hidden) return;
    const fn = KEYS[e.key.length === 1 ? e.key.toLowerCase() : e.key];
    if (fn) { e.preventDefault(); fn(); }
  });

  for (const b of document.querySelectorAll("button[data-action]")) {
    b.addEventListener("click", () => {
      const a = b.dataset.action;
      if (a === "prev") back();
      else if (a === "next") forward();
      else if (a === "undo") undo();
      else if (a === "relabel") enqueue(openRelabel);
      else decide(a);
      b.blur();
    });
  }

  // ------------------------------------------------------------------ who is reviewing
  function useAnnotator(name) {
    name = name.trim();
    if (!name) return;
    const url = new URL(window.location.href);
    url.searchParams.set("annotator", name);
    history.replaceState(null, "", url.toString());
    config.annotator = name;
    $("who").value = name;
    $("ask-name").hidden = true;
    start();
  }

  $("who-form").addEventListener("submit", (e) => { e.preventDefault(); useAnnotator($("who").value); $("who").blur(); });
  $("name-form").addEventListener("submit", (e) => { e.preventDefault(); useAnnotator($("name-input").value); });

  function start() {
    return enqueue(async () => {
      if (!set) {
        set = await api(`/api/set`);
        classByKey = Object.fromEntries(set.classes.map((c) => [c.key, c]));
      }
      state = await api(`/api/state?annotator=${encodeURIComponent(config.annotator)}`);
      $("main").hidden = false;
      go(firstUndecided());
      document.body.dataset.ready = "1";
    });
  }

  if (config.annotator) start();
  else { $("ask-name").hidden = false; $("name-input").focus(); }
})();
