// The login form: posts the token and follows the server's redirect; the
// form also works without JavaScript.
'use strict';
(() => {
  const form = document.getElementById('login');
  const error = document.getElementById('error');
  const submit = document.getElementById('submit');
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    error.hidden = true;
    submit.disabled = true;
    try {
      const res = await fetch(form.action, {
        method: 'POST',
        credentials: 'same-origin',
        body: new URLSearchParams(new FormData(form)),
      });
      if (res.ok && res.redirected) {
        location.assign(res.url);
        return;
      }
      error.textContent = res.status === 401
        ? 'That token was not accepted.'
        : res.status === 403
          ? 'The dashboard needs a writable admin token: tenant and read-only tokens cannot log in.'
          : `Login failed (HTTP ${res.status}).`;
    } catch (e) {
      error.textContent = 'The server cannot be reached.';
    }
    error.hidden = false;
    submit.disabled = false;
  });
})();
