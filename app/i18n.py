"""UI strings of the site chrome per locale, and locale negotiation."""

from gradlab.config import DEFAULT_LOCALE, LOCALES

LANGUAGE_NAMES = {"en": "English", "es": "Español", "de": "Deutsch", "tr": "Türkçe"}

UI: dict[str, dict[str, str]] = {
    "en": {
        "skip": "Skip to content",
        "language": "Language",
        "lessons": "Lessons",
        "lesson_n_of_m": "Lesson {n} of {m}",
        "reading_time": "{minutes} min read",
        "coming_soon": "coming soon",
        "untranslated_notice": "Parts of this lesson are not translated yet and are shown in "
        "English.",
        "untranslated_badge": "Not translated yet",
        "quick_check": "Quick check",
        "check_answer": "Check my answer",
        "quiz_correct": "Correct!",
        "quiz_wrong": "Not quite. Think about when a cycle is complete.",
        "faq": "Frequently asked questions",
        "exercise": "Exercise",
        "your_code": "Your code",
        "submit": "Run and grade",
        "hints": "Hints",
        "hint_n": "Hint {n}",
        "result": "Result",
        "status_queued": "Waiting for a grader…",
        "status_running": "Running your code…",
        "status_passed": "Passed",
        "status_failed": "Not yet right",
        "status_error": "Could not be graded",
        "score": "Score",
        "checks": "Checks",
        "diagnosis": "What went wrong",
        "error_line": "line {line}",
        "stdout": "Output",
        "stderr": "Errors and warnings",
        "truncated": "Output was cut short.",
        "ran_on": "Ran on {device} in {seconds} s.",
        "back_to_lesson": "Back to the lesson",
        "course_intro": "Four short lessons on training neural networks fast. Read them for free, "
        "write the code in your browser, and get precise feedback from a GPU grader.",
        "not_found": "Page not found",
    },
    "es": {
        "skip": "Saltar al contenido",
        "language": "Idioma",
        "lessons": "Lecciones",
        "lesson_n_of_m": "Lección {n} de {m}",
        "reading_time": "{minutes} min de lectura",
        "coming_soon": "próximamente",
        "untranslated_notice": "Algunas partes de esta lección aún no están traducidas y se "
        "muestran en inglés.",
        "untranslated_badge": "Aún sin traducir",
        "quick_check": "Comprobación rápida",
        "check_answer": "Comprobar respuesta",
        "quiz_correct": "¡Correcto!",
        "quiz_wrong": "No exactamente. Piensa en cuándo se completa un ciclo.",
        "faq": "Preguntas frecuentes",
        "exercise": "Ejercicio",
        "your_code": "Tu código",
        "submit": "Ejecutar y corregir",
        "hints": "Pistas",
        "hint_n": "Pista {n}",
        "result": "Resultado",
        "status_queued": "Esperando a un corrector…",
        "status_running": "Ejecutando tu código…",
        "status_passed": "Superado",
        "status_failed": "Todavía no es correcto",
        "status_error": "No se pudo corregir",
        "score": "Puntuación",
        "checks": "Comprobaciones",
        "diagnosis": "Qué ha fallado",
        "error_line": "línea {line}",
        "stdout": "Salida",
        "stderr": "Errores y avisos",
        "truncated": "La salida se ha recortado.",
        "ran_on": "Ejecutado en {device} en {seconds} s.",
        "back_to_lesson": "Volver a la lección",
        "course_intro": "Cuatro lecciones breves para entrenar redes neuronales más rápido. "
        "Léelas gratis, escribe el código en el navegador y recibe correcciones precisas de "
        "un corrector con GPU.",
        "not_found": "Página no encontrada",
    },
    "de": {
        "skip": "Zum Inhalt springen",
        "language": "Sprache",
        "lessons": "Lektionen",
        "lesson_n_of_m": "Lektion {n} von {m}",
        "reading_time": "{minutes} Min. Lesezeit",
        "coming_soon": "in Kürze",
        "untranslated_notice": "Teile dieser Lektion sind noch nicht übersetzt und werden auf "
        "Englisch angezeigt.",
        "untranslated_badge": "Noch nicht übersetzt",
        "quick_check": "Kurzer Check",
        "check_answer": "Antwort prüfen",
        "quiz_correct": "Richtig!",
        "quiz_wrong": "Nicht ganz. Überleg, wann ein Zyklus vollständig ist.",
        "faq": "Häufige Fragen",
        "exercise": "Übung",
        "your_code": "Dein Code",
        "submit": "Ausführen und bewerten",
        "hints": "Hinweise",
        "hint_n": "Hinweis {n}",
        "result": "Ergebnis",
        "status_queued": "Wartet auf einen Bewerter …",
        "status_running": "Dein Code läuft …",
        "status_passed": "Bestanden",
        "status_failed": "Noch nicht richtig",
        "status_error": "Konnte nicht bewertet werden",
        "score": "Punkte",
        "checks": "Prüfungen",
        "diagnosis": "Was schiefging",
        "error_line": "Zeile {line}",
        "stdout": "Ausgabe",
        "stderr": "Fehler und Warnungen",
        "truncated": "Die Ausgabe wurde gekürzt.",
        "ran_on": "Lief auf {device} in {seconds} s.",
        "back_to_lesson": "Zurück zur Lektion",
        "course_intro": "Vier kurze Lektionen, wie du neuronale Netze schneller trainierst. "
        "Kostenlos lesen, Code im Browser schreiben und präzises Feedback von einem "
        "GPU-Bewerter bekommen.",
        "not_found": "Seite nicht gefunden",
    },
    "tr": {
        "skip": "İçeriğe geç",
        "language": "Dil",
        "lessons": "Dersler",
        "lesson_n_of_m": "Ders {n} / {m}",
        "reading_time": "{minutes} dk okuma",
        "coming_soon": "yakında",
        "untranslated_notice": "Bu dersin bazı bölümleri henüz çevrilmedi ve İngilizce "
        "gösteriliyor.",
        "untranslated_badge": "Henüz çevrilmedi",
        "quick_check": "Hızlı kontrol",
        "check_answer": "Cevabımı kontrol et",
        "quiz_correct": "Doğru!",
        "quiz_wrong": "Tam değil. Bir turun ne zaman tamamlandığını düşün.",
        "faq": "Sık sorulan sorular",
        "exercise": "Alıştırma",
        "your_code": "Kodun",
        "submit": "Çalıştır ve değerlendir",
        "hints": "İpuçları",
        "hint_n": "İpucu {n}",
        "result": "Sonuç",
        "status_queued": "Değerlendirici bekleniyor…",
        "status_running": "Kodun çalışıyor…",
        "status_passed": "Geçti",
        "status_failed": "Henüz doğru değil",
        "status_error": "Değerlendirilemedi",
        "score": "Puan",
        "checks": "Kontroller",
        "diagnosis": "Ne ters gitti",
        "error_line": "satır {line}",
        "stdout": "Çıktı",
        "stderr": "Hatalar ve uyarılar",
        "truncated": "Çıktı kısaltıldı.",
        "ran_on": "{device} üzerinde {seconds} sn'de çalıştı.",
        "back_to_lesson": "Derse dön",
        "course_intro": "Sinir ağlarını hızlı eğitmek üzerine dört kısa ders. Ücretsiz oku, "
        "kodu tarayıcıda yaz ve GPU'lu bir değerlendiriciden net geri bildirim al.",
        "not_found": "Sayfa bulunamadı",
    },
}


def translate(locale: str, key: str, **values: object) -> str:
    template = UI.get(locale, {}).get(key) or UI[DEFAULT_LOCALE][key]
    return template.format(**values) if values else template


def negotiate(cookie: str | None, accept_language: str | None) -> str:
    """The remembered choice, else the best Accept-Language match, else English."""
    if cookie in LOCALES:
        return cookie
    ranked: list[tuple[float, int, str]] = []
    for position, part in enumerate((accept_language or "").split(",")):
        tag, _, params = part.strip().partition(";")
        quality = 1.0
        if params.strip().startswith("q="):
            try:
                quality = float(params.strip()[2:])
            except ValueError:
                continue
        primary = tag.strip().lower().split("-")[0]
        if primary in LOCALES and quality > 0:
            ranked.append((-quality, position, primary))
    return min(ranked)[2] if ranked else DEFAULT_LOCALE
