// The console's only script; every page works without it. With it, a form
// that carries data-confirm asks first (and then sends confirmed=1), the
// bulk form shows only the fields of the action chosen, and a page whose
// body names a data-live endpoint refreshes its figures in place every
// data-poll milliseconds: an element's data-field names the JSON value it
// shows, data-bar and data-x the width and x of an SVG bar, data-if the
// value that shows it, data-action the action (of the answer's actions) a
// form does, shown where it applies, data-reason where the reason it does
// not apply yet goes.
(function () {
  'use strict';

  function each(selector, fn) {
    Array.prototype.forEach.call(document.querySelectorAll(selector), fn);
  }

  // The bulk form: a field marked data-verbs is for those actions only.
  var verb = document.querySelector('#bulk-form select[name="verb"]');
  function showVerbFields() {
    each('#bulk-form [data-verbs]', function (el) {
      el.hidden = el.getAttribute('data-verbs').split(' ').indexOf(verb.value) < 0;
    });
  }
  if (verb) {
    verb.addEventListener('change', showVerbFields);
    showVerbFields();
  }

  document.addEventListener('submit', function (ev) {
    var form = ev.target;
    var question = form.getAttribute('data-confirm');
    if (!question) {
      return;
    }
    if (!window.confirm(question)) {
      ev.preventDefault();
      return;
    }
    var confirmed = form.querySelector('input[name="confirmed"]');
    if (confirmed) {
      confirmed.value = '1';
    }
  });

  var endpoint = document.body.getAttribute('data-live');
  if (!endpoint) {
    return;
  }
  var every = parseInt(document.body.getAttribute('data-poll'), 10) || 2000;
  var status = document.getElementById('live-status');

  function lookup(data, path) {
    return path.split('.').reduce(function (value, key) {
      return value === undefined || value === null ? undefined : value[key];
    }, data);
  }

  function holds(data, expr) {
    var negate = expr.charAt(0) === '!';
    var value = Boolean(lookup(data, negate ? expr.slice(1) : expr));
    return negate ? !value : value;
  }

  // cell adds a cell with its column's label (the stacked layout of a
  // narrow screen shows it) and its text, if any.
  function cell(row, label, text) {
    var td = document.createElement('td');
    if (label) {
      td.setAttribute('data-label', label);
    }
    if (text !== undefined) {
      td.textContent = text;
    }
    row.appendChild(td);
    return td;
  }

  function small(text) {
    var s = document.createElement('small');
    s.textContent = text;
    return s;
  }

  // renderWorkers rebuilds the queue page's worker table, as the server
  // renders it.
  function renderWorkers(workers) {
    var tbody = document.getElementById('workers');
    if (!tbody) {
      return;
    }
    // The controls' forms, with this sign-in's CSRF token, for a
    // signed-in operator.
    var controls = document.getElementById('worker-controls');
    var rows = document.createDocumentFragment();
    workers.forEach(function (w) {
      var tr = document.createElement('tr');
      cell(tr, 'Stage', w.stage);
      var id = cell(tr, 'Worker', w.id);
      id.appendChild(document.createElement('br'));
      id.appendChild(small(w.service + ' ' + w.version));
      cell(tr, 'Host', w.host);
      cell(tr, 'State', w.shown);
      var jobs = cell(tr, 'In flight');
      if (w.in_flight.length === 0) {
        jobs.textContent = '\u2014';
      }
      w.in_flight.forEach(function (j) {
        var a = document.createElement('a');
        a.href = '/jobs/' + encodeURIComponent(j.job_id);
        a.textContent = j.job_id;
        jobs.appendChild(a);
        jobs.appendChild(small(' ' + j.since));
        jobs.appendChild(document.createElement('br'));
      });
      cell(tr, 'Heartbeat', w.heartbeat);
      cell(tr, 'Handled', w.outcomes);
      if (controls) {
        var td = cell(tr, 'Control');
        if (w.address) {
          var forms = controls.content.firstElementChild.cloneNode(true);
          Array.prototype.forEach.call(forms.querySelectorAll('form[data-verb]'), function (f) {
            f.action = '/workers/' + encodeURIComponent(w.id) + '/' + f.getAttribute('data-verb');
            f.hidden = f.getAttribute('data-wstates').split(' ').indexOf(w.state) < 0;
          });
          td.appendChild(forms);
        } else {
          td.appendChild(small('no address registered'));
        }
      }
      rows.appendChild(tr);
    });
    if (workers.length === 0) {
      var tr = document.createElement('tr');
      tr.className = 'none';
      cell(tr, '', 'no worker registered').colSpan = controls ? 8 : 7;
      rows.appendChild(tr);
    }
    tbody.replaceChildren(rows);
  }

  // renderHeld rebuilds the list of held collections from the page's
  // <template>, which carries the release form and its CSRF token.
  function renderHeld(names) {
    var list = document.getElementById('held');
    var proto = document.getElementById('held-item');
    if (!list || !proto) {
      return;
    }
    var shown = Array.prototype.map.call(list.querySelectorAll('li[data-collection]'), function (li) {
      return li.getAttribute('data-collection');
    });
    if (shown.join('\n') === names.join('\n')) {
      return;
    }
    var items = document.createDocumentFragment();
    names.forEach(function (name) {
      var li = proto.content.firstElementChild.cloneNode(true);
      li.setAttribute('data-collection', name);
      li.querySelector('[data-name]').textContent = name;
      var input = li.querySelector('input[name="collection"]');
      if (input) {
        input.value = name;
      }
      items.appendChild(li);
    });
    if (names.length === 0) {
      var none = document.createElement('li');
      none.className = 'none';
      none.textContent = 'none';
      items.appendChild(none);
    }
    list.replaceChildren(items);
  }

  // renderOptions keeps a select's first option (the default) and makes
  // the others the names given, as the server renders them.
  function renderOptions(select, names) {
    if (!select) {
      return;
    }
    var shown = Array.prototype.slice.call(select.options, 1).map(function (o) { return o.textContent; });
    if (shown.join('\n') === names.join('\n')) {
      return;
    }
    while (select.options.length > 1) {
      select.remove(1);
    }
    names.forEach(function (name) {
      var o = document.createElement('option');
      o.textContent = name;
      select.appendChild(o);
    });
  }

  // renderHistory rebuilds the job page's timeline when it has changed.
  function renderHistory(rows) {
    var table = document.getElementById('history');
    if (!table) {
      return;
    }
    var tbody = table.tBodies[0];
    var key = rows.map(function (h) { return h.at + ' ' + h.to; }).join('\n');
    if (tbody.getAttribute('data-key') === key) {
      return;
    }
    var items = document.createDocumentFragment();
    rows.forEach(function (h) {
      var tr = document.createElement('tr');
      cell(tr, 'When', h.at).className = 'time';
      cell(tr, 'From', h.from);
      var to = document.createElement('span');
      to.className = 'state s-' + h.to.toLowerCase();
      to.textContent = h.to;
      cell(tr, 'To').appendChild(to);
      cell(tr, 'Time in the state left', h.in_state).className = 'num';
      cell(tr, 'By', h.worker);
      cell(tr, 'Message', h.message).className = 'msg';
      items.appendChild(tr);
    });
    tbody.replaceChildren(items);
    tbody.setAttribute('data-key', key);
  }

  // renderAttention rebuilds the queue page's strip of what needs an
  // operator: each item says what it is and links to where it is dealt
  // with.
  function renderAttention(items) {
    var list = document.getElementById('attention');
    if (!list) {
      return;
    }
    var key = items.map(function (it) { return it.kind + ' ' + it.text + ' ' + it.href; }).join('\n');
    if (list.getAttribute('data-key') === key) {
      return;
    }
    var lis = document.createDocumentFragment();
    items.forEach(function (it) {
      var li = document.createElement('li');
      li.className = 'a-' + it.kind;
      var text = document.createElement('span');
      text.setAttribute('data-text', '');
      text.textContent = it.text;
      var a = document.createElement('a');
      a.href = it.href;
      a.textContent = it.do;
      li.appendChild(text);
      li.appendChild(document.createTextNode(' '));
      li.appendChild(a);
      lis.appendChild(li);
    });
    if (items.length === 0) {
      var none = document.createElement('li');
      none.className = 'none';
      none.textContent = 'Nothing: no stage is stalled, no collection held, nothing failed.';
      lis.appendChild(none);
    }
    list.replaceChildren(lis);
    list.setAttribute('data-key', key);
  }

  function apply(data) {
    each('[data-field]', function (el) {
      var value = lookup(data, el.getAttribute('data-field'));
      if (value === undefined || value === null || el.textContent === String(value)) {
        return;
      }
      el.textContent = String(value);
      if (el.hasAttribute('data-state-class')) {
        el.className = 'state s-' + String(value).toLowerCase();
      }
    });
    each('[data-bar]', function (el) {
      var value = lookup(data, el.getAttribute('data-bar'));
      if (typeof value === 'number') {
        el.setAttribute('width', String(value));
      }
    });
    each('[data-x]', function (el) {
      var value = lookup(data, el.getAttribute('data-x'));
      if (typeof value === 'number') {
        el.setAttribute('x', String(value));
      }
    });
    each('[data-if]', function (el) {
      el.hidden = !holds(data, el.getAttribute('data-if'));
    });
    if (data.actions && typeof data.actions === 'object') {
      each('[data-action]', function (el) {
        var a = data.actions[el.getAttribute('data-action')];
        el.hidden = !(a && a.applies);
      });
      each('[data-reason]', function (el) {
        var a = data.actions[el.getAttribute('data-reason')];
        var why = a && !a.applies ? a.reason : '';
        el.hidden = !why;
        var text = el.querySelector('[data-reason-text]');
        if (text && text.textContent !== why) {
          text.textContent = why;
        }
      });
    }
    if (Array.isArray(data.requeue_states)) {
      renderOptions(document.getElementById('requeue-state'), data.requeue_states);
    }
    if (Array.isArray(data.history)) {
      renderHistory(data.history);
    }
    if (Array.isArray(data.attention)) {
      renderAttention(data.attention);
    }
    if (Array.isArray(data.workers)) {
      renderWorkers(data.workers);
    }
    if (Array.isArray(data.held_collections)) {
      renderHeld(data.held_collections);
    }
  }

  function show(text, failing) {
    if (status) {
      status.textContent = text;
      status.className = failing ? 'failing' : '';
    }
  }

  function tick() {
    if (document.hidden) {
      window.setTimeout(tick, every);
      return;
    }
    window.fetch(endpoint, { headers: { Accept: 'application/json' }, cache: 'no-store', credentials: 'same-origin' })
      .then(function (resp) {
        return resp.json().then(function (data) {
          if (!resp.ok) {
            throw new Error(data.error || resp.statusText);
          }
          return data;
        });
      })
      .then(function (data) {
        apply(data);
        // UTC, as every time the pages show.
        show('live: updated ' + new Date().toISOString().slice(11, 19) + ' UTC', false);
      }, function (err) {
        show('live updates failing: ' + err.message, true);
      })
      .then(function () {
        window.setTimeout(tick, every);
      });
  }

  window.setTimeout(tick, every);
}());
