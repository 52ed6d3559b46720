// Confirmations: a form (or the button that submits it) with data-confirm asks first. Without
// this script the server asks instead, on a page of its own (templates/confirm.html): the form
// then arrives without confirmed=1.
(function () {
  document.addEventListener("submit", function (event) {
    var form = event.target, button = event.submitter;
    var question = (button && button.dataset.confirm) || form.dataset.confirm;
    if (!question) return;
    if (!window.confirm(question)) { event.preventDefault(); return; }
    var mark = form.querySelector("input[name=confirmed]");
    if (!mark) {
      mark = document.createElement("input");
      mark.type = "hidden"; mark.name = "confirmed"; form.appendChild(mark);
    }
    mark.value = "1";
  });
})();
