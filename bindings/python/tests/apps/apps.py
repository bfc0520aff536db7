"""Runs two real applications written for onnxruntime -- RapidOCR (text detection, direction classification and
recognition) and Google's Magika (file-type detection) -- and prints what they found, as JSON.  With ``tessera`` as
the argument, ``tessera`` stands in for the onnxruntime module before the applications import it: nothing in them
changes."""

from __future__ import annotations

import json
import sys

if sys.argv[1] == "tessera":
    import tessera

    sys.modules["onnxruntime"] = tessera

import cv2  # noqa: E402
import numpy as np  # noqa: E402
from magika import Magika  # noqa: E402
from rapidocr_onnxruntime import RapidOCR  # noqa: E402


def ocr() -> list:
    image = np.full((160, 640, 3), 255, np.uint8)
    cv2.putText(image, "Tessera 2026", (10, 70), cv2.FONT_HERSHEY_SIMPLEX, 2, (0, 0, 0), 4)
    cv2.putText(image, "ONNX runtime", (10, 140), cv2.FONT_HERSHEY_SIMPLEX, 1.5, (20, 20, 20), 3)
    result, _ = RapidOCR()(image)
    return [[text, round(float(score), 3)] for _, text, score in (result or [])]


def file_types() -> list:
    samples = [b"import os\nprint(os.getcwd())\n" * 20, b'{"a": [1, 2, 3], "b": {"c": "d"}}' * 10,
               b"<html><head><title>x</title></head><body><p>Hello</p></body></html>" * 5,
               b"#include <stdio.h>\nint main(void) { printf(\"hi\\n\"); return 0; }\n" * 10,
               b"%PDF-1.4\n1 0 obj\n<< /Type /Catalog >>\nendobj\n" * 10]
    magika = Magika()
    return [[magika.identify_bytes(s).output.label, round(float(magika.identify_bytes(s).score), 3)]
            for s in samples]


print(json.dumps({"ocr": ocr(), "magika": file_types()}))
