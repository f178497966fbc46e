(function () {
  function key(cell, numeric) {
    var v = cell.getAttribute('data-sort');
    if (v === null) { v = cell.textContent.trim(); }
    if (v === '') { return null; }
    if (numeric) { var n = parseFloat(v); return isNaN(n) ? null : n; }
    return v.toLowerCase();
  }
  function sortBy(table, col, th) {
    var dir = th.getAttribute('aria-sort') === 'ascending' ? 'descending' : 'ascending';
    var heads = table.tHead.rows[0].cells;
    for (var i = 0; i < heads.length; i++) { heads[i].removeAttribute('aria-sort'); }
    th.setAttribute('aria-sort', dir);
    var numeric = th.classList.contains('num');
    var body = table.tBodies[0];
    var rows = Array.prototype.slice.call(body.rows);
    var sign = dir === 'ascending' ? 1 : -1;
    rows.forEach(function (r, i) { r._pos = i; });
    rows.sort(function (a, b) {
      var x = key(a.cells[col], numeric), y = key(b.cells[col], numeric);
      if (x === null && y === null) { return a._pos - b._pos; }
      if (x === null) { return 1; }          /* blanks last either way */
      if (y === null) { return -1; }
      if (x < y) { return -sign; }
      if (x > y) { return sign; }
      return a._pos - b._pos;                /* stable */
    });
    rows.forEach(function (r) { body.appendChild(r); });
  }
  var tables = document.querySelectorAll('table.sortable');
  Array.prototype.forEach.call(tables, function (table) {
    var heads = table.tHead.rows[0].cells;
    Array.prototype.forEach.call(heads, function (th, col) {
      var b = th.querySelector('button');
      if (b) { b.addEventListener('click', function () { sortBy(table, col, th); }); }
    });
  });
})();
