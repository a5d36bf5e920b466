"""Third-party verifiers under test, each a thin adapter exposing the peer's own code through the protocol.

An adapter only converts arrays and feeds uniforms where the peer's code draws them; what is judged
is the peer's code. Each adapter module declares what it cannot do (``CAPABILITIES``).
"""
