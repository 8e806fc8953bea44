"""The report's views: each section of it (ops, device, syncs, timeline, ncu, ranks, ...)
as a ``View`` of the document's parts, and ``catalog.VIEWS``, the built-in ones in the order
every renderer shows them."""
