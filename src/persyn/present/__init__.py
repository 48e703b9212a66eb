"""Presentation shared by the surfaces that print stored text (the CLI, the line-mode chat, the
console): below all of them, so none imports another for it."""
