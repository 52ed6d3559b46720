// Policy editors: show only the fields the selected kind uses. Every field stays in the form
// (hidden ones keep their values and are sent as they are); without JavaScript all are shown,
// each with the kinds that use it.
(function () {
  function sync(form) {
    const kind = form.querySelector('select[name="policy_kind"]');
    if (!kind) return;
    form.querySelectorAll("[data-kinds]").forEach(function (field) {
      field.hidden = field.dataset.kinds.split(" ").indexOf(kind.value) < 0;
    });
  }
  function syncAll() { document.querySelectorAll("form.policy").forEach(sync); }
  document.addEventListener("change", function (event) {
    if (event.target.name === "policy_kind") sync(event.target.form);
  });
  document.addEventListener("htmx:afterSettle", syncAll);  // a preview re-renders the form
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", syncAll);
  else syncAll();
})();
