"""The files the OSWorld app arms open (bench/app-arms.ts), made with the libraries OSWorld's
task authors use: openpyxl for the sheet, python-docx for the document, python-pptx for the deck,
Pillow for the image. The video is made by the image's ffmpeg in a scratch session instead.

Usage: python app-files.py OUT_DIR"""

import sys
from pathlib import Path

import docx
import openpyxl
import pptx
from PIL import Image, ImageDraw

out = Path(sys.argv[1])

wb = openpyxl.Workbook()
ws = wb.active
ws.title = "Sheet1"
ws.append(["a", "b", "sum"])
for i in range(1, 201):
    ws.append([i, i * 7 % 13, f"=A{i + 1}+B{i + 1}"])
wb.save(out / "bench.xlsx")

d = docx.Document()
d.add_heading("Drums bench", level=1)
for i in range(1, 61):
    d.add_paragraph(f"Paragraph {i}: the quick brown fox jumps over the lazy dog, again and again, for the benchmark.")
d.save(out / "bench.docx")

deck = pptx.Presentation()
for i in range(1, 11):
    s = deck.slides.add_slide(deck.slide_layouts[1])
    s.shapes.title.text = f"Slide {i}"
    body = s.placeholders[1].text_frame
    body.text = f"Point one of slide {i}"
    body.add_paragraph().text = f"Point two of slide {i}"
deck.save(out / "bench.pptx")

im = Image.new("RGB", (1280, 800), (40, 90, 160))
ImageDraw.Draw(im).ellipse((300, 150, 980, 650), fill=(230, 180, 40))
im.save(out / "bench.png")
