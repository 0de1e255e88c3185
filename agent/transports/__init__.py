"""Transports adapt a client connection to a Pipecat transport and run its call.

- :mod:`agent.transports.webrtc`: browser and SDK calls over SmallWebRTC.
- :mod:`agent.transports.telephony`: phone calls over media-stream WebSockets (Twilio).
- :mod:`agent.transports.telnyx`: the second carrier, Telnyx, behind the same seam.
- :mod:`agent.transports.traits`: what a transport declares about its client.

Each one reserves a call slot first, asks the server's
:class:`~agent.worker.CallTaskFactory` for the worker and runs it; none knows which
pipeline that is.
"""
