"""The artifacts a simulated result points to: a one-page PDF report and a person card.

They exist so that the absolute URLs in ``result.artifacts`` lead somewhere real; their
content is a short digest of the (deterministic) result of the investigation.
"""
from simulator.results import result_for


def person_card(kind: str, target: str) -> dict:
    """A small JSON card summarising who the target seems to be."""
    result = result_for(kind, target, artifact_base="")
    verified = result["profiles"]["verified"]
    return {
        "kind": kind,
        "target": target,
        "display_name": verified[0]["display_name"] if verified else "",
        "risk": result["risk"],
        "platforms": [p["platform"] for p in verified],
        "breaches": [b["name"] for b in result["breaches"]],
    }


def report_pdf(kind: str, target: str) -> bytes:
    """A valid one-page PDF stating the target, its risk and its summary."""
    result = result_for(kind, target, artifact_base="")
    lines = [f"Investigation report ({kind})", target,
             f"Risk score: {result['risk']['score']}", result["ai_summary"][:90]]
    return _pdf_with_lines(lines)


def _pdf_with_lines(lines: list[str]) -> bytes:
    shown = " ".join(f"({_pdf_escape(line)}) '" for line in lines)
    stream = f"BT /F1 12 Tf 16 TL 72 740 Td {shown} ET".encode("latin-1", errors="replace")
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R"
        b" /Resources << /Font << /F1 5 0 R >> >> >>",
        b"<< /Length %d >>\nstream\n%s\nendstream" % (len(stream), stream),
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n%s\nendobj\n" % (number, body)
    xref_at = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref_at)
    return bytes(out)


def _pdf_escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")
