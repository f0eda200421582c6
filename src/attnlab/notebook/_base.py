"""What the four widgets share: checked traits, an error line, and a static HTML fallback.

A widget declares its controls (``step``, ``causal``, ``d_k`` ...) as traits and one ``_clean``
method that checks a proposed value; ``_Figure`` runs it before any value is stored, whether the
value comes from a cell or from the view. A refused value raises ``WidgetValueError`` in the
cell, is sent back to the view as the last good value, and its reason is kept in ``error``,
which the view shows as a line above the figure until the next accepted change.
"""

from __future__ import annotations

from pathlib import Path

import anywidget
import traitlets as t

from attnlab.errors import AttnlabError
from attnlab.notebook._checks import WidgetValueError, shown
from attnlab.notebook._views import html_of

__all__ = ["Checked", "Figure"]

_ESM = Path(__file__).with_name("widgets.js")


class Checked(t.Any):
    """A trait whose every value, None included, goes through its widget's ``_clean``.

    Typed traits (``t.Int``) would refuse a wrong type in traitlets' words before the widget's
    check runs, and ``t.Any`` lets None past every check: here the widget's check decides alone.
    """

    allow_none = False


class Figure(anywidget.AnyWidget):
    """A figure as a widget. Subclasses validate their traits with ``@t.validate`` handlers that
    call ``self._checked(proposal)``, and recompute ``view`` when a checked trait changes."""

    _esm = _ESM
    # The kernel's output, read-only to cells (set_trait writes them): a cell sets the controls.
    view = t.Dict(read_only=True).tag(sync=True)  # what the figure shows
    controls = t.List(read_only=True).tag(sync=True)  # the view's inputs, one per settable trait
    error = t.Unicode("", read_only=True).tag(sync=True)  # why the last change was refused

    def _repr_mimebundle_(self, **kwargs):
        data = super()._repr_mimebundle_(**kwargs) or {}
        if isinstance(data, tuple):
            data = data[0]
        return {**data, "text/html": html_of(self.view)}

    def _clean(self, name: str, value):
        """``value`` checked for trait ``name``, in the form to store; AttnlabError if bad."""
        raise NotImplementedError

    def _checked(self, proposal):
        name, value = proposal["trait"].name, proposal["value"]
        try:
            value = self._clean(name, value)
        except AttnlabError as exc:
            message = str(exc)
            if not self._cross_validation_lock:  # a plain set: the stored value is the old one
                message += f" ({name} stays {shown(self._trait_values.get(name))})"
            # Inside hold_trait_notifications this is rolled back with the rest (see set_state).
            self.set_trait("error", message)
            raise WidgetValueError(message) from None
        self.set_trait("error", "")
        return value

    def set_state(self, sync_data):
        """A change from the view: refused values go back to the view as the last good ones."""
        try:
            super().set_state(sync_data)
        except WidgetValueError as exc:
            # traitlets rolled every trait of this message back; tell the view and say why.
            names = [name for name in sync_data if name in self.keys]
            kept = ", ".join(f"{name} stays {shown(getattr(self, name))}" for name in names)
            self.set_trait("error", f"{exc} ({kept})")
            self.send_state(names)
