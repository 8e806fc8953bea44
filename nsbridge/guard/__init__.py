"""What nsbridge lets in and out, below everything else (stdlib only): the folders it may
read and run from for an MCP client (``confine``), the range of every number a user or an
agent gives it (``limits``), and text from runs made safe to print (``printable``)."""
