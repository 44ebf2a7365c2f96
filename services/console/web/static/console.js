// The console's only script; every page works without it. With it, a form
// that carries data-confirm asks first (and then sends confirmed=1), and a
// page whose body names a data-live endpoint refreshes its figures in place
// every data-poll milliseconds: an element's data-field names the JSON value
// it shows, data-bar and data-x the width and x of an SVG bar, data-if the
// value that shows it, data-states the states (job or batch) it applies in.
(function () {
  'use strict';

  function each(selector, fn) {
    Array.prototype.forEach.call(document.querySelectorAll(selector), fn);
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
    // The controls' forms, with this session's CSRF token, for a
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
    if (typeof data.state === 'string') {
      each('[data-states]', function (el) {
        el.hidden = el.getAttribute('data-states').split(' ').indexOf(data.state) < 0;
      });
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
